package batch

import (
	"sync"
	"testing"
	"time"
)

// TestWorkersReuseAndClose: a worker that finished a call takes the next
// one (no new goroutine), a call that hangs does not hold up others, idle
// workers are bounded, and close ends the idle ones.
func TestWorkersReuseAndClose(t *testing.T) {
	var w workers
	done := make(chan struct{})
	w.do(func() { close(done) })
	<-done
	waitIdle(t, &w, 1)

	// The idle worker takes the next call.
	done = make(chan struct{})
	w.do(func() { close(done) })
	<-done
	waitIdle(t, &w, 1)

	// A call that hangs keeps its worker; the next call runs anyway.
	hang := make(chan struct{})
	w.do(func() { <-hang })
	ran := make(chan struct{})
	w.do(func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a call waited for a hung one")
	}
	close(hang)
	waitIdle(t, &w, 2)

	// More calls at once than maxIdleWorkers: the surplus workers exit.
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range maxIdleWorkers + 10 {
		wg.Add(1)
		w.do(func() { <-start; wg.Done() })
	}
	close(start)
	wg.Wait()
	waitIdle(t, &w, maxIdleWorkers)

	w.close()
	waitIdle(t, &w, 0)
	// After close a call still runs, on a goroutine of its own.
	done = make(chan struct{})
	w.do(func() { close(done) })
	<-done
	waitIdle(t, &w, 0)
}

func waitIdle(t *testing.T, w *workers, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		got := len(w.idle)
		w.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle workers: %d, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}
