package quorum_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/quorum"
)

// exampleClients connects to the three test deployments. In a service each
// is a client of its own deployment (a cluster or a single server):
//
//	a, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"redis-a:6379"}})
//	b, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"redis-b:6379"}})
//	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"redis-c:6379"}})
func exampleClients() []rueidis.Client {
	var out []rueidis.Client
	for _, d := range shared {
		c, err := d.Client()
		if err != nil {
			panic(err)
		}
		out = append(out, c)
	}
	return out
}

func closeAll(cs []rueidis.Client) {
	for _, c := range cs {
		c.Close()
	}
}

func ExampleNew() {
	clients := exampleClients()
	defer closeAll(clients)

	locker, err := quorum.New(clients, quorum.Options{
		Options: slotlock.Options{TTL: 10 * time.Second, Prefix: "example-quorum"},
		// ClockDrift (default TTL/100 + 2 ms) and AttemptTimeout (default
		// TTL/10, at most 1 s) can usually stay zero.
	})
	if err != nil {
		panic(err) // errors.Is(err, slotlock.ErrInvalid): the message names the option
	}
	defer locker.Close()
	fmt.Println(locker.Deployments(), "deployments, majority", locker.Majority())
	// Output: 3 deployments, majority 2
}

func ExampleLocker_Lock() {
	clients := exampleClients()
	defer closeAll(clients)
	locker, err := quorum.New(clients, quorum.Options{Options: slotlock.Options{Prefix: "example-quorum-lock"}})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()

	lease, err := locker.Lock(ctx, "order:1", "order:2")
	if err != nil {
		panic(err) // nothing is held on any deployment
	}
	// Work under the lease's context: it is cancelled when fewer than a
	// majority still hold the keys, or the validity window passes.
	work, stop := lease.Context(ctx)
	fmt.Println("held on", len(lease.Held()), "deployments; working:", work.Err() == nil)
	stop()
	if err := lease.Release(ctx); err != nil {
		panic(err)
	}
	// Output: held on 3 deployments; working: true
}

func ExampleLocker_TryLock() {
	clients := exampleClients()
	defer closeAll(clients)
	locker, err := quorum.New(clients, quorum.Options{Options: slotlock.Options{Prefix: "example-quorum-try"}})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()

	held, err := locker.TryLock(ctx, "invoice:9")
	if err != nil {
		panic(err)
	}
	defer held.Release(ctx) //nolint:errcheck

	_, err = locker.TryLock(ctx, "invoice:9", "invoice:10")
	var qe *quorum.QuorumError
	if errors.As(err, &qe) {
		fmt.Printf("%d of %d needed deployments granted\n", qe.Done, qe.Need)
	}
	var ce *slotlock.ConflictError
	if errors.As(err, &ce) {
		fmt.Println("held by others:", ce.Conflicts[0].Key)
	}
	// Output:
	// 0 of 2 needed deployments granted
	// held by others: invoice:9
}
