package slotlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
)

// configEpoch returns the config epoch of master node: the epoch its
// fencing tokens are drawn under (batch/scripts/fence.lua).
func configEpoch(t testing.TB, node *redistest.Node) int64 {
	t.Helper()
	n, err := node.ConfigEpoch(ctxT(t, 10*time.Second))
	require.NoError(t, err)
	return n
}

// TestFencingTokensCarryTheEpoch checks the counter rules of fence.lua
// on a slot's counter set by hand: a token is epoch * 2^32 + n with the
// epoch of the master that drew it, above a counter left by a master of a
// higher epoch (a slot moved in), and a counter that cannot give a token
// (2^32 draws under one epoch, not a number, not a string) fails the call
// with an error naming the counter and nothing locked, in both script
// modes. Mutation: drawing with INCR again (the token before this file)
// fails the first two checks.
func TestFencingTokensCarryTheEpoch(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, 60*time.Second)
			l := e.locker(slotlock.Options{TTL: 10 * time.Second, Fencing: true, PerSlot: m.perSlot})
			names, err := slot.NewNamer(e.prefix)
			require.NoError(t, err)
			key := "fenced"
			s := slot.KeySlot(key)
			node, err := e.c.NodeForSlot(ctx, s)
			require.NoError(t, err)
			epoch := configEpoch(t, node)
			fk := names.FenceKey(s)
			token := func() int64 {
				t.Helper()
				le, err := l.TryLock(ctx, key, "other:1", "other:2")
				require.NoError(t, err)
				f, ok := le.FencingToken(key)
				require.True(t, ok)
				require.NoError(t, le.Release(ctx))
				return f
			}
			set := func(args ...string) {
				t.Helper()
				require.NoError(t, node.Do(ctx, "DEL", fk).Error())
				if len(args) > 0 {
					require.NoError(t, node.Do(ctx, args...).Error())
				}
			}

			set("SET", fk, "5") // a counter of the old format, or of epoch 0
			require.Equal(t, epoch<<32+1, token(), "first token under epoch %d", epoch)
			require.Equal(t, epoch<<32+2, token())

			higher := (epoch+3)<<32 + 7 // left by a master of a later epoch
			set("SET", fk, strconv.FormatInt(higher, 10))
			require.Equal(t, higher+1, token(), "never below the counter")

			for _, bad := range []struct {
				name string
				args []string
				want string
			}{
				{"exhausted", []string{"SET", fk, strconv.FormatInt(epoch<<32+1<<32-1, 10)}, "2^32 tokens"},
				{"not a number", []string{"SET", fk, "abc"}, "not a token"},
				{"fraction", []string{"SET", fk, "1.5"}, "not a token"},
				{"wrong type", []string{"HSET", fk, "f", "1"}, "WRONGTYPE"},
			} {
				set(bad.args...)
				_, err := l.TryLock(ctx, key, "other:1", "other:2")
				require.ErrorIs(t, err, slotlock.ErrRedis, bad.name)
				var ne *slotlock.NodeError
				require.ErrorAs(t, err, &ne, bad.name)
				require.Equal(t, node.Addr(), ne.Node, bad.name)
				require.ErrorContains(t, err, fk, bad.name)
				require.ErrorContains(t, err, bad.want, bad.name)
				for k, v := range e.lockKeys() {
					require.True(t, strings.HasSuffix(k, "}#fence"), "%s: %q = %q left", bad.name, k, v)
				}
			}
		})
	}
}

// BenchmarkFencingCost locks and releases K random keys with and without
// fencing tokens, side by side in one run: the price of drawing a token
// per slot (one CLUSTER INFO per call, a GET and a SET per slot). Run
// with -count to alternate the rounds.
func BenchmarkFencingCost(b *testing.B) {
	for _, k := range []int{1, 100} {
		for _, fencing := range []bool{false, true} {
			b.Run(fmt.Sprintf("K=%d/fencing=%v", k, fencing), func(b *testing.B) {
				e := newEnv(b)
				l := e.locker(slotlock.Options{TTL: 30 * time.Second, Strategy: slotlock.StrategyLua, Fencing: fencing})
				ctx := context.Background()
				r := rand.New(rand.NewPCG(2, uint64(k)))
				keys := make([]string, k)
				lockRelease := func() {
					for i := range keys {
						keys[i] = "order:" + strconv.Itoa(r.IntN(1_000_000))
					}
					lease, err := l.Lock(ctx, keys...)
					if err != nil {
						b.Fatal(err)
					}
					if err := lease.Release(ctx); err != nil {
						b.Fatal(err)
					}
				}
				lockRelease() // the slot map, the script cache
				n := 0
				for b.Loop() {
					lockRelease()
					n++
				}
				b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "batches/s")
			})
		}
	}
}
