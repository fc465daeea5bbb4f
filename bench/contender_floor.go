package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock/batch"
	"github.com/slotlock/slotlock/internal/lockval"
	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/topology"
	"github.com/slotlock/slotlock/slot"
)

// ReservationFloor names the reference contender of floorFactory.
const ReservationFloor = "reservation-floor"

// floorFactory is what waiting by reservation costs Redis when there is
// nothing to wait for: every batch goes the way a contended batch goes
// across processes (one reserve round, the confirm, the release; the
// engine slotlock's Locker uses, called directly), on keys nobody else
// wants, so no line is joined and no key handed on. The Redis commands
// and CPU of its batches are the protocol's floor (docs/design.md, "Known
// limits"); a contended batch costs that plus its queue work. Not in the
// matrix: the across-process targets show it beside them (Probes).
var floorFactory = Factory{
	Name:  ReservationFloor,
	About: "slotlock's engine driven through the path of a batch that waits across processes, on keys nobody else wants: one reserve round (every key reserved), the confirm, the release; each one script call per node in one pipelined round trip",
	Safe:  true,
	New: func(env *Env, _ int) (Contender, error) {
		client, err := env.client()
		if err != nil {
			return nil, err
		}
		names, err := slot.NewNamer(slotlockPrefix(env))
		if err != nil {
			client.Close()
			return nil, err
		}
		eng := batch.New(client, topology.New(client), batch.Options{})
		return &floorContender{env: env, client: client, eng: eng, names: names}, nil
	},
}

type floorContender struct {
	env    *Env
	client rueidis.Client
	eng    *batch.Engine
	names  slot.Namer
}

func (c *floorContender) Acquirer(int) Acquirer { return &floorAcquirer{c: c} }

func (c *floorContender) Close() error {
	c.eng.Close()
	c.client.Close()
	return nil
}

type floorAcquirer struct{ c *floorContender }

// errFloorContended is a reserve round of the floor probe that did not
// reserve every key: its keys are meant to be nobody else's.
var errFloorContended = errors.New("bench: reservation floor: a key was not free")

func (a *floorAcquirer) Lock(ctx context.Context, keys []string) (Held, error) {
	c := a.c
	set := protocol.NewSet(c.names, keys)
	who := protocol.Who{Holder: newToken()}
	r := &protocol.Request{Who: who, TTL: TTL, CleanupTimeout: 5 * time.Second}
	ticket, err := c.eng.Ticket(ctx)
	if err != nil {
		return nil, err
	}
	res := c.eng.Reserve(ctx, set, r, ticket, 1, false)
	held := &floorHeld{c: c, set: set, who: who}
	if res.Err == nil {
		for _, k := range res.Keys {
			if !k.Mine {
				res.Err = errFloorContended
				break
			}
		}
	}
	if res.Err != nil {
		c.eng.Reserve(context.WithoutCancel(ctx), set, r, ticket, 2, true)
		return nil, fmt.Errorf("reserve: %w", res.Err)
	}
	at := c.eng.Attempt(ctx, set, 0, r, protocol.AttemptOptions{Mode: protocol.Confirm, Ticket: ticket})
	if at.Err != nil || at.FirstFailure(0) != set.Len() {
		_ = held.Release(context.WithoutCancel(ctx))
		c.eng.Reserve(context.WithoutCancel(ctx), set, r, ticket, 2, true)
		return nil, fmt.Errorf("confirm: %w", errors.Join(at.Err, errFloorContended))
	}
	return held, nil
}

type floorHeld struct {
	c   *floorContender
	set *protocol.Set
	who protocol.Who
}

func (h *floorHeld) Check(ctx context.Context) error {
	return checkValues(ctx, h.c.env.probe, h.set.Lock, func(_ int, v string, found bool) bool {
		return found && lockval.HeldBy(v, h.who.Holder)
	})
}

func (h *floorHeld) Release(ctx context.Context) error {
	res := h.c.eng.Release(ctx, h.set, nil, h.who)
	if res.Err != nil {
		return res.Err
	}
	if len(res.Lost) > 0 {
		return fmt.Errorf("%w: %d keys", ErrNotHeld, len(res.Lost))
	}
	return nil
}
