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

func ExampleLocker_Lock() {
	client := exampleClient()
	defer client.Close()
	locker, _ := slotlock.New(client, slotlock.Options{Prefix: "example-lock"})
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
	locker, _ := slotlock.New(client, slotlock.Options{Prefix: "example-try"})
	other, _ := slotlock.New(client, slotlock.Options{Prefix: "example-try"})
	ctx := context.Background()

	held, _ := other.Lock(ctx, "order:7")
	defer held.Release(ctx)

	_, err := locker.TryLock(ctx, "order:6", "order:7", "order:8")
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
	locker, _ := slotlock.New(client, slotlock.Options{Prefix: "example-release"})
	ctx := context.Background()

	lease, _ := locker.Lock(ctx, "invoice:1", "invoice:2")
	fmt.Println(lease.Release(ctx))
	fmt.Println(lease.Release(ctx)) // idempotent
	// Output:
	// <nil>
	// <nil>
}

func ExampleLease_Extend() {
	client := exampleClient()
	defer client.Close()
	locker, _ := slotlock.New(client, slotlock.Options{Prefix: "example-extend", TTL: 5 * time.Second})
	ctx := context.Background()

	lease, _ := locker.Lock(ctx, "job:42")
	defer lease.Release(ctx)
	if err := lease.Extend(ctx, time.Minute); err != nil {
		// errors.Is(err, slotlock.ErrNotHeld): some key expired first.
		panic(err)
	}
	fmt.Println(time.Until(lease.Deadline()).Round(time.Minute))
	// Output: 1m0s
}

func ExampleLocker_Do() {
	client := exampleClient()
	defer client.Close()
	locker, _ := slotlock.New(client, slotlock.Options{Prefix: "example-do"})
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

func ExampleLease_Guard() {
	client := exampleClient()
	defer client.Close()
	locker, _ := slotlock.New(client, slotlock.Options{Prefix: "example-guard"})
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
	v, _ := client.Do(ctx, client.B().Get().Key(order).Build()).ToString()
	fmt.Println(v, reply.IsNil())
	// Output: paid true
}
