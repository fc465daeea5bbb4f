package slotlock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
)

// exampleClient connects to the test cluster. In a service this is
//
//	client, err := rueidis.NewClient(rueidis.ClientOption{
//		InitAddress: []string{"redis-0:6379", "redis-1:6379", "redis-2:6379"},
//	})
func exampleClient() rueidis.Client {
	client, err := cluster.Client()
	if err != nil {
		panic(err)
	}
	return client
}

func ExampleNew() {
	client := exampleClient()
	defer client.Close()

	locker, err := slotlock.New(client, slotlock.Options{
		TTL:    10 * time.Second, // server-side expiry of every lock key
		Prefix: "example-new",    // namespace of the lock keys
	})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	fmt.Println("ready")
	// Output: ready
}

// newExampleLocker is the setup every example repeats in a service: one
// Locker per client, closed when the service stops.
func newExampleLocker(client rueidis.Client, opt slotlock.Options) *slotlock.Locker {
	locker, err := slotlock.New(client, opt)
	if err != nil {
		panic(err) // errors.Is(err, slotlock.ErrInvalid): the message names the option
	}
	return locker
}

func ExampleLocker_Lock() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-lock"})
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// 1,000 order IDs spread over every node of the cluster, all or nothing.
	orders := make([]string, 1000)
	for i := range orders {
		orders[i] = fmt.Sprintf("order:%d", i)
	}
	lease, err := locker.Lock(ctx, orders...)
	if err != nil {
		panic(err) // ctx ended first: nothing is held
	}
	defer lease.Release(context.Background())

	fmt.Println(len(lease.Keys()), "keys held, expiring in", time.Until(lease.Deadline()).Round(time.Second))
	// Output: 1000 keys held, expiring in 30s
}

func ExampleLocker_TryLock() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-try"})
	defer locker.Close()
	other := newExampleLocker(client, slotlock.Options{Prefix: "example-try"})
	defer other.Close()
	ctx := context.Background()

	held, err := other.Lock(ctx, "order:7")
	if err != nil {
		panic(err)
	}
	defer held.Release(ctx)

	_, err = locker.TryLock(ctx, "order:6", "order:7", "order:8")
	var conflict *slotlock.ConflictError
	if errors.As(err, &conflict) {
		for _, c := range conflict.Conflicts {
			fmt.Printf("%s is held for up to %v more\n", c.Key, c.TTL.Round(time.Second))
		}
	}
	fmt.Println(errors.Is(err, slotlock.ErrNotAcquired))
	// Output:
	// order:7 is held for up to 30s more
	// true
}

func ExampleLease_Release() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-release"})
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.Lock(ctx, "invoice:1", "invoice:2")
	if err != nil {
		panic(err)
	}
	fmt.Println(lease.Release(ctx))
	fmt.Println(lease.Release(ctx)) // idempotent
	// Output:
	// <nil>
	// <nil>
}

func ExampleLease_Extend() {
	client := exampleClient()
	defer client.Close()
	// A lease that is not renewed lives for its TTL unless extended.
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-extend", TTL: 5 * time.Second, Renew: slotlock.RenewNever})
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.Lock(ctx, "job:42")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)
	if err := lease.Extend(ctx, time.Minute); err != nil {
		// errors.Is(err, slotlock.ErrNotHeld): some key expired first.
		panic(err)
	}
	fmt.Println(time.Until(lease.Deadline()).Round(time.Minute))
	// Output: 1m0s
}

func ExampleLease_Context() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-context"})
	defer locker.Close()
	ctx := context.Background()

	lease, err := locker.Lock(ctx, "report:2026-11")
	if err != nil {
		panic(err)
	}
	// Work under lctx stops when the lease ends: released, or lost (a key
	// expired, or an operator deleted it).
	lctx, cancel := lease.Context(ctx)
	defer cancel()

	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
	<-lctx.Done()
	fmt.Println(context.Cause(lctx))
	// Output: slotlock: lease released
}

func ExampleLocker_Do() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-do"})
	defer locker.Close()
	ctx := context.Background()

	err := locker.Do(ctx, []string{"account:1", "account:2"}, func(ctx context.Context) error {
		fmt.Println("moving money while both accounts are locked")
		return nil
	})
	fmt.Println(err)
	// Output:
	// moving money while both accounts are locked
	// <nil>
}

func ExampleWithOwner() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-owner"})
	defer locker.Close()
	ctx := slotlock.WithOwner(context.Background(), "request-81")

	outer, err := locker.Lock(ctx, "cart:5", "stock:9")
	if err != nil {
		panic(err)
	}
	// The same owner takes a key it holds again (a nested call), without
	// waiting for itself; another owner would wait.
	inner, err := locker.Lock(ctx, "stock:9")
	if err != nil {
		panic(err)
	}
	fmt.Println(inner.Release(ctx)) // one hold of stock:9 is left
	_, err = locker.TryLock(slotlock.WithOwner(context.Background(), "request-82"), "stock:9")
	fmt.Println(errors.Is(err, slotlock.ErrNotAcquired))
	fmt.Println(outer.Release(ctx)) // the last hold: the keys are free
	// Output:
	// <nil>
	// true
	// <nil>
}

func ExampleLease_FencingToken() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-fence", Fencing: true})
	defer locker.Close()
	ctx := context.Background()

	first, err := locker.Lock(ctx, "ledger:1")
	if err != nil {
		panic(err)
	}
	t1, _ := first.FencingToken("ledger:1")
	if err := first.Release(ctx); err != nil {
		panic(err)
	}
	second, err := locker.Lock(ctx, "ledger:1")
	if err != nil {
		panic(err)
	}
	defer second.Release(ctx)
	t2, _ := second.FencingToken("ledger:1")
	// A store that keeps the largest token it has seen per key and refuses
	// writes with a smaller one is safe from a holder that was paused past
	// its lease.
	fmt.Println(t2 > t1)
	// Output: true
}

func ExampleLease_Guard() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-guard"})
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	defer client.Do(context.Background(), client.B().Del().Key("example-guard:order:42").Build())

	const order = "example-guard:order:42" // the user's own data key
	lease, err := locker.Lock(ctx, order)
	if err != nil {
		panic(err)
	}
	defer lease.Release(context.Background())

	// The write runs only while the lease still holds the order's lock,
	// checked in the same script on the same node.
	if _, err := lease.Guard(ctx, []string{order}, "SET", order, "paid"); err != nil {
		panic(err) // errors.Is(err, slotlock.ErrLeaseLost): the write did not run
	}
	reply, err := lease.Guard(ctx, []string{order}, "SET", order, "refunded", "NX")
	if err != nil {
		panic(err)
	}
	v, err := client.Do(ctx, client.B().Get().Key(order).Build()).ToString()
	if err != nil {
		panic(err)
	}
	fmt.Println(v, reply.IsNil())
	// Output: paid true
}

// Inspect answers "who holds this lock, until when, who waits" without
// touching it. Holder is the short ID the holder's lease reports (log
// lease.ID() when you take one), never its token.
func ExampleLocker_Inspect() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-inspect", Fencing: true})
	defer locker.Close()
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "order:42")
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	infos, err := locker.Inspect(ctx, "order:42", "order:43")
	if err != nil {
		panic(err)
	}
	for _, k := range infos {
		fmt.Println(k.Key, k.Held, k.Holder == lease.ID(), k.TTL > 0, k.Fence > 0, k.WaitersTotal)
	}
	// Output:
	// order:42 true true true true 0
	// order:43 false false false false 0
}

// InspectPermits shows who holds units of counted resources.
func ExampleLocker_InspectPermits() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-inspect-permits"})
	defer locker.Close()
	ctx := context.Background()
	lease, err := locker.Acquire(ctx, slotlock.Request{
		Permits: []slotlock.Permit{{Resource: "gpu-pool", Units: 2, Limit: 8}},
	})
	if err != nil {
		panic(err)
	}
	defer lease.Release(ctx)

	infos, err := locker.InspectPermits(ctx, "gpu-pool")
	if err != nil {
		panic(err)
	}
	p := infos[0]
	fmt.Println(p.Resource, p.Used, "of", p.Limit, len(p.Holders), p.Holders[0].ID == lease.ID())
	// Output:
	// gpu-pool 2 of 8 1 true
}

// countingObserver counts grants: the smallest useful Observer.
type countingObserver struct{ grants, lost int }

func (o *countingObserver) Acquired(e slotlock.AcquireEvent) {
	if e.Outcome == slotlock.OutcomeAcquired {
		o.grants++
	}
}
func (o *countingObserver) Released(slotlock.ReleaseEvent) {}
func (o *countingObserver) Renewed(slotlock.RenewEvent)    {}
func (o *countingObserver) Ended(e slotlock.EndEvent) {
	if e.Lost {
		o.lost++
	}
}

// An Observer sees every acquisition, release, renewal round and lease
// end (package slotlockotel is one for OpenTelemetry). Its methods run
// on the Locker's goroutines: a real one must be safe for concurrent use.
func ExampleObserver() {
	client := exampleClient()
	defer client.Close()
	obs := &countingObserver{}
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-observer", Observer: obs})
	defer locker.Close()
	ctx := context.Background()
	for range 3 {
		lease, err := locker.Lock(ctx, "a", "b")
		if err != nil {
			panic(err)
		}
		_ = lease.Release(ctx)
	}
	fmt.Println(obs.grants, "grants,", obs.lost, "lost")
	// Output: 3 grants, 0 lost
}

func ExampleLocker_Acquire() {
	client := exampleClient()
	defer client.Close()
	locker := newExampleLocker(client, slotlock.Options{Prefix: "example-acquire"})
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	// Change an order while its customer and price list must not change
	// (shared: other orders may read them too), and take one of the
	// warehouse's 4 picking slots; all of it or nothing.
	job := slotlock.Request{
		Exclusive: []string{"order:17"},
		Shared:    []string{"customer:9", "pricelist:eu"},
		Permits:   []slotlock.Permit{{Resource: "warehouse:3:pickers", Units: 1, Limit: 4}},
		TTL:       5 * time.Second,
		Wait:      2 * time.Second,
	}
	lease, err := locker.Acquire(ctx, job)
	if err != nil {
		panic(err) // errors.Is(err, slotlock.ErrNotAcquired) if still held after 2 s
	}
	// Another order of the same customer gets in at the same time.
	other, err := locker.Acquire(ctx, slotlock.Request{
		Exclusive: []string{"order:18"},
		Shared:    []string{"customer:9"},
		Permits:   []slotlock.Permit{{Resource: "warehouse:3:pickers", Units: 1, Limit: 4}},
	})
	fmt.Println("second order:", err)
	// A writer of the customer is refused while they read it.
	_, err = locker.Acquire(ctx, slotlock.Request{Exclusive: []string{"customer:9"}})
	var conflict *slotlock.ConflictError
	fmt.Println("customer update refused:", errors.As(err, &conflict), conflict.Conflicts[0].Key)
	// Three more pickers would be five of four.
	_, err = locker.Acquire(ctx, slotlock.Request{
		Permits: []slotlock.Permit{{Resource: "warehouse:3:pickers", Units: 3, Limit: 4}},
	})
	fmt.Println("3 more pickers:", errors.Is(err, slotlock.ErrNotAcquired))

	_ = other.Release(ctx)
	_ = lease.Release(ctx)
	// Output:
	// second order: <nil>
	// customer update refused: true customer:9
	// 3 more pickers: true
}
