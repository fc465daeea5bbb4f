package redistest_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/slotlock/slotlock/internal/redistest"
)

var cluster *redistest.Cluster

// A test package starts one cluster in TestMain and hands it to its tests
// through Require, which skips them (or fails them under CI=true) when no
// cluster could be started.
func ExampleMain() {
	// In a _test.go file:
	//
	//	func TestMain(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }
	_ = func(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }

	_ = func(t *testing.T) {
		c := redistest.Require(t, cluster)
		client, err := c.Client()
		if err != nil {
			t.Fatal(err)
		}
		defer client.Close()
		// ... lock keys through client, then reset for the next test:
		if err := c.FlushAll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// Faults go through the live topology: find the master behind a slot, kill
// it, wait for its replica to take over, bring it back as a replica.
func ExampleCluster_NodeForSlot() {
	ctx := context.Background()
	c, err := redistest.Start(ctx, redistest.Options{})
	if err != nil {
		fmt.Println("no cluster:", err)
		return
	}
	defer c.Close()

	master, err := c.NodeForSlot(ctx, 4242)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := master.Kill(); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.WaitReady(ctx); err != nil { // returns after the failover
		fmt.Println(err)
		return
	}
	if err := master.Restart(ctx); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.WaitReady(ctx); err != nil { // it rejoins, learns it lost
		fmt.Println(err)
		return
	}
	role, _ := master.Role(ctx)
	fmt.Println("old master is now a", role)
}
