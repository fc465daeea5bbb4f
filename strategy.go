package slotlock

import (
	"context"
	"errors"
	"fmt"

	"github.com/slotlock/slotlock/internal/protocol"
	"github.com/slotlock/slotlock/internal/rediserr"
)

// Strategy selects how a Locker writes lock keys.
type Strategy uint8

const (
	// StrategyAuto uses Lua scripts and switches, once and for good, to
	// the pipeline strategy the first time the server refuses a script
	// (an ACL without @scripting, a proxy without EVAL); it logs the
	// switch once through Options.Logger.
	StrategyAuto Strategy = iota
	// StrategyLua uses check-then-write scripts: one per node (or per
	// slot). Every feature works.
	StrategyLua
	// StrategyPipeline uses pipelined SET NX PX and releases without Lua.
	// Reentrancy, fencing tokens and guarded writes need scripts and fail
	// with ErrUnsupported; docs/strategies.md has the table.
	StrategyPipeline
)

func (s Strategy) String() string {
	switch s {
	case StrategyAuto:
		return "auto"
	case StrategyLua:
		return "lua"
	case StrategyPipeline:
		return "pipeline"
	}
	return "unknown"
}

// engine is what a strategy offers the Locker: the protocol's Strategy
// (attempt, release, extend, wait) and the watchdog's batched renewal.
// batch.Engine (Lua) and pipeline.Engine implement it.
type engine interface {
	protocol.Strategy
	ExtendMany(ctx context.Context, jobs []protocol.ExtendJob) []protocol.OwnerResult
}

// scriptsDenied reports whether err holds an error reply saying the server
// refuses to run scripts at all (rediserr.ScriptsDenied). A refused script
// wrote nothing.
func scriptsDenied(err error) bool {
	var ne *protocol.NodeError
	return errors.As(err, &ne) && ne.Kind == rediserr.ErrRedis && rediserr.ScriptsDenied(ne.Err)
}

// current returns the engine new leases use.
func (l *Locker) current() (engine, Strategy) {
	if Strategy(l.strategy.Load()) == StrategyPipeline {
		return l.pipe, StrategyPipeline
	}
	return l.lua, StrategyLua
}

// fallBack switches an Auto Locker to the pipeline strategy, once.
func (l *Locker) fallBack(cause error) bool {
	if l.opt.Strategy != StrategyAuto {
		return false
	}
	if l.strategy.CompareAndSwap(uint32(StrategyLua), uint32(StrategyPipeline)) && l.log != nil {
		l.log.Warn("slotlock: the server refuses scripts; switching to the pipeline strategy",
			"prefix", l.names.Prefix(), "cause", cause)
	}
	return true
}

// Strategy returns the strategy new leases use now.
func (l *Locker) Strategy() Strategy {
	_, s := l.current()
	return s
}

// pipelineSupports says whether the pipeline strategy can serve r.
func pipelineSupports(r *protocol.Request, set *protocol.Set) error {
	switch {
	case !set.Plain():
		return fmt.Errorf("%w: shared keys and permits need scripts; strategy %v", ErrUnsupported, StrategyPipeline)
	case r.Who.Lease != "":
		return fmt.Errorf("%w: reentrant locking (WithOwner) needs scripts; strategy %v", ErrUnsupported, StrategyPipeline)
	case r.Fencing:
		return fmt.Errorf("%w: fencing tokens need scripts; strategy %v", ErrUnsupported, StrategyPipeline)
	}
	return nil
}
