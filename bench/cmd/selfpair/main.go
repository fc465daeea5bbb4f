// Command selfpair checks the uncontended pairs' method (bench.Interleave,
// as slotbench runs it): two contenders, a contender against itself by
// default, are run batch by batch for a number of rounds, the side that
// starts alternating from round to round, and each round's ratio of
// batches/s is printed with the balanced figures (the geometric mean of
// each two consecutive rounds). A contender against itself must come out
// at 1.00 in every round, whichever side starts: a ratio that moves with
// the order is the method's, not the contenders' (docs/design.md, "The
// uncontended pairs, batch by batch").
//
//	cd bench && go run ./cmd/selfpair -addrs "$(cat ../.cache/devcluster.addrs)" -k 1
//
// It writes under a prefix of its own on a cluster you already have and
// refuses one that holds keys under it (bench.Attach).
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/slotlock/slotlock/bench"
)

func main() {
	addrs := flag.String("addrs", "127.0.0.1:7000", "seed addresses of the cluster, comma-separated")
	a := flag.String("a", "raw-pipeline", "the first contender")
	b := flag.String("b", "", "the second contender (default: the first)")
	k := flag.Int("k", 1, "keys per batch")
	rounds := flag.Int("rounds", 6, "rounds (even: each order as often)")
	d := flag.Duration("d", 667*time.Millisecond, "each side's share of a round (slotbench's pair time)")
	prefix := flag.String("prefix", "selfpair", "key prefix")
	flag.Parse()
	if *b == "" {
		*b = *a
	}
	ctx := context.Background()
	env, err := bench.Attach(ctx, strings.Split(*addrs, ","), *prefix)
	if err != nil {
		log.Fatal(err)
	}
	defer env.Close()
	var ratios []float64
	for r := range *rounds {
		ra, err := env.NewRun(ctx, bench.Cell{Contender: *a, K: *k, W: 1})
		if err != nil {
			log.Fatal(err)
		}
		rb, err := env.NewRun(ctx, bench.Cell{Contender: *b, K: *k, W: 1})
		if err != nil {
			log.Fatal(err)
		}
		for _, run := range []*bench.Run{ra, rb} {
			if err := run.Verify(ctx, 1); err != nil {
				log.Fatal(err)
			}
		}
		bFirst := r%2 == 1
		x, y, err := bench.Interleave(ctx, ra, rb, 2*(*d), bFirst)
		if err != nil {
			log.Fatal(err)
		}
		starts := "a"
		if bFirst {
			starts = "b"
		}
		_ = ra.Close()
		_ = rb.Close()
		ratio := x.BatchesPerSec() / y.BatchesPerSec()
		ratios = append(ratios, ratio)
		fmt.Printf("round %d, %s first: a %.0f batches/s, b %.0f, a/b %.3f\n", r+1, starts, x.BatchesPerSec(), y.BatchesPerSec(), ratio)
	}
	fmt.Print("balanced:")
	for _, b := range bench.Balanced(ratios) {
		fmt.Printf(" %.3f", b)
	}
	fmt.Println()
}
