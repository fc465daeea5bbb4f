package batch

import "sync"

// workers runs the node calls of multi-node operations (see exec) on
// goroutines kept between operations. A goroutine started for each call
// grows its stack through rueidis's call chain every time: newstack and
// copystack were 6% of the client's CPU at K = 100. A
// kept goroutine has grown once. A call that hangs (a paused node) keeps
// its goroutine busy and out of the idle list; later calls get others.
type workers struct {
	mu     sync.Mutex
	idle   []chan func()
	closed bool
}

// maxIdleWorkers bounds the goroutines kept idle: enough for 16 goroutines
// locking across a few nodes at once; one beyond that exits when its call
// is done.
const maxIdleWorkers = 64

// do runs fn on an idle worker, or on a new one.
func (w *workers) do(fn func()) {
	w.mu.Lock()
	if n := len(w.idle); n > 0 {
		ch := w.idle[n-1]
		w.idle = w.idle[:n-1]
		w.mu.Unlock()
		ch <- fn // buffered, and the worker is idle: never blocks
		return
	}
	closed := w.closed
	w.mu.Unlock()
	if closed {
		go fn()
		return
	}
	ch := make(chan func(), 1)
	ch <- fn
	go w.loop(ch)
}

func (w *workers) loop(ch chan func()) {
	for fn := range ch {
		fn()
		w.mu.Lock()
		if w.closed || len(w.idle) >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle = append(w.idle, ch)
		w.mu.Unlock()
	}
}

// close ends the idle workers; busy ones end when their call returns.
func (w *workers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	for _, ch := range w.idle {
		close(ch)
	}
	w.idle = nil
}
