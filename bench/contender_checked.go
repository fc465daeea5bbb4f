package bench

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/internal/rediserr"
	"github.com/slotlock/slotlock/slot"
)

//go:embed scripts/release_node.lua
var releaseNodeLua string

var releaseNodeSHA = func() string {
	sum := sha1.Sum([]byte(releaseNodeLua))
	return hex.EncodeToString(sum[:])
}()

// CheckedPipeline names the reference contender of checkedFactory.
const CheckedPipeline = "checked-pipeline"

// checkedFactory is the raw pipeline with the two things a lock cannot do
// without: a token unique to the holder and an owner-checked release. It
// locks as raw-pipeline does (every SET NX PX in one DoMulti, with a
// random token) and releases with one call
// per master of the smallest owner-checked script (scripts/release_node.lua:
// GET and DEL per key), all in one DoMulti. On Redis 7.0, which has no
// compare-and-delete command, it is the ceiling of any safe lock that
// takes keys with SET NX: the gap between it and raw-pipeline is the price
// of the owner check, the gap between slotlock and it slotlock's own. Not
// in the matrix (Contenders): the reference pairs of the targets use it
// (Probes).
var checkedFactory = Factory{
	Name:  CheckedPipeline,
	About: "raw-pipeline's lock with a random token (128 bits), and an owner-checked release: one minimal script call per master (GET and DEL per key), all in one DoMulti",
	Safe:  true,
	New: func(env *Env, _ int) (Contender, error) {
		client, err := env.client()
		if err != nil {
			return nil, err
		}
		owners, err := slotOwners(context.Background(), env.probe)
		if err != nil {
			client.Close()
			return nil, err
		}
		return &checkedContender{env: env, client: client, owners: owners}, nil
	},
}

// Probes are contenders that the matrix leaves out and the target pairs
// use as references (Lookup finds them).
var Probes = []Factory{checkedFactory, floorFactory}

type checkedContender struct {
	env    *Env
	client rueidis.Client
	owners *[slot.Count]int16 // master index by slot, read once
}

func (c *checkedContender) Acquirer(int) Acquirer { return c }
func (c *checkedContender) Close() error          { c.client.Close(); return nil }

func (c *checkedContender) Lock(ctx context.Context, keys []string) (Held, error) {
	// 128 random bits, as every safe contender draws: a counter, as the
	// raw pipeline's, tells batches apart in one process only, and a
	// lock's token must be unique across all its holders.
	token := newToken()
	err := setAllNX(ctx, c.client, keys, token, func(ctx context.Context, got []string) error {
		_, err := c.release(ctx, got, token)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &checkedHeld{c: c, keys: keys, token: token}, nil
}

// release sends one release_node call per master holding some of keys, in
// one DoMulti, and returns how many keys were not ours.
func (c *checkedContender) release(ctx context.Context, keys []string, token string) (lost int, err error) {
	var groups [][]string // by master index
	for _, k := range keys {
		o := int(c.owners[slot.KeySlot(k)])
		if o < 0 {
			return 0, fmt.Errorf("bench: slot of %s has no master", k)
		}
		for len(groups) <= o {
			groups = append(groups, nil)
		}
		if groups[o] == nil {
			groups[o] = append(make([]string, 0, len(keys)+1), token)
		}
		groups[o] = append(groups[o], k)
	}
	var cmds rueidis.Commands
	var args [][]string
	for _, g := range groups {
		if g != nil {
			cmds = append(cmds, c.client.B().Evalsha().Sha1(releaseNodeSHA).Numkeys(1).Key(g[1]).Arg(g...).Build())
			args = append(args, g)
		}
	}
	res := c.client.DoMulti(ctx, cmds...)
	for i, r := range res {
		if rediserr.IsNoScript(r.Error()) {
			g := args[i]
			res[i] = c.client.Do(ctx, c.client.B().Eval().Script(releaseNodeLua).Numkeys(1).Key(g[1]).Arg(g...).Build())
		}
		n, err := res[i].AsInt64()
		if err != nil {
			return lost, fmt.Errorf("release on the master of %s: %w", args[i][1], err)
		}
		lost += int(n)
	}
	return lost, nil
}

type checkedHeld struct {
	c     *checkedContender
	keys  []string // the worker's slice: valid until its next batch
	token string
}

func (h *checkedHeld) Check(ctx context.Context) error {
	return checkValues(ctx, h.c.env.probe, h.keys, func(_ int, v string, found bool) bool {
		return found && v == h.token
	})
}

func (h *checkedHeld) Release(ctx context.Context) error {
	lost, err := h.c.release(ctx, h.keys, h.token)
	if err != nil {
		return err
	}
	if lost > 0 {
		return fmt.Errorf("%w: %d of %d keys not ours at release", ErrNotHeld, lost, len(h.keys))
	}
	return nil
}

// slotOwners reads CLUSTER SLOTS once: the index of each slot's master
// (in the order the reply names them), -1 for an uncovered slot. The
// benchmark moves no slots.
func slotOwners(ctx context.Context, probe rueidis.Client) (*[slot.Count]int16, error) {
	var owners [slot.Count]int16
	for i := range owners {
		owners[i] = -1
	}
	ranges, err := probe.Do(ctx, probe.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, fmt.Errorf("bench: CLUSTER SLOTS: %w", err)
	}
	index := map[string]int16{}
	for _, r := range ranges {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			return nil, fmt.Errorf("bench: CLUSTER SLOTS: malformed range %v", r)
		}
		lo, err1 := f[0].AsInt64()
		hi, err2 := f[1].AsInt64()
		node, err3 := f[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(node) < 2 {
			return nil, fmt.Errorf("bench: CLUSTER SLOTS: malformed range %v", r)
		}
		host, _ := node[0].ToString()
		port, _ := node[1].AsInt64()
		addr := host + ":" + strconv.FormatInt(port, 10)
		o, ok := index[addr]
		if !ok {
			o = int16(len(index))
			index[addr] = o
		}
		for s := lo; s <= hi && s < slot.Count; s++ {
			owners[s] = o
		}
	}
	return &owners, nil
}
