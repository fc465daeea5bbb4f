package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ServerStats is what the Redis nodes spent on a run, read from INFO.
type ServerStats struct {
	// Calls and Usec sum INFO commandstats over the masters, admin commands
	// (INFO, CONFIG, CLUSTER, ...) left out: the commands the contender sent
	// and the time Redis spent executing them.
	Calls, Usec int64
	// ScriptCalls and ScriptUsec are the EVALSHA and EVAL part of it.
	ScriptCalls, ScriptUsec int64
	// CPU is the process CPU time (user+sys) of every node, replicas
	// included: execution plus network I/O plus replication.
	CPU time.Duration
	// ByCommand splits Calls by command name (lower case).
	ByCommand map[string]int64
}

// adminCommands are the harness's and the clients' bookkeeping, not work a
// contender asked for.
var adminCommands = map[string]bool{
	"info": true, "config": true, "cluster": true, "ping": true, "hello": true,
	"client": true, "command": true, "readonly": true, "flushall": true,
	"role": true, "script": true, "replconf": true, "psync": true, "sync": true,
}

// resetServerStats zeroes INFO commandstats on every node and returns the
// CPU time the nodes have used so far.
func (e *Env) resetServerStats(ctx context.Context) (time.Duration, error) {
	for _, n := range e.cluster.Nodes() {
		if err := n.Do(ctx, "CONFIG", "RESETSTAT").Error(); err != nil {
			return 0, fmt.Errorf("CONFIG RESETSTAT on %s: %w", n.Addr(), err)
		}
	}
	return e.ServerCPU(ctx)
}

// serverStats reads what the nodes did since resetServerStats returned cpu0.
func (e *Env) serverStats(ctx context.Context, cpu0 time.Duration) (ServerStats, error) {
	s := ServerStats{ByCommand: map[string]int64{}}
	for _, m := range e.masters {
		text, err := m.Info(ctx, "commandstats")
		if err != nil {
			return s, err
		}
		for _, line := range strings.Split(text, "\n") {
			name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
			cmd, isCmd := strings.CutPrefix(name, "cmdstat_")
			if !ok || !isCmd || adminCommands[strings.SplitN(cmd, "|", 2)[0]] {
				continue
			}
			calls, usec := infoInt(fields, "calls"), infoInt(fields, "usec")
			s.Calls += calls
			s.Usec += usec
			s.ByCommand[cmd] += calls
			if cmd == "evalsha" || cmd == "eval" {
				s.ScriptCalls += calls
				s.ScriptUsec += usec
			}
		}
	}
	cpu, err := e.ServerCPU(ctx)
	if err != nil {
		return s, err
	}
	s.CPU = cpu - cpu0
	return s, nil
}

func nodeCPU(ctx context.Context, info func(context.Context, string) (string, error)) (time.Duration, error) {
	text, err := info(ctx, "cpu")
	if err != nil {
		return 0, err
	}
	var sec float64
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			sec += f
		}
	}
	return time.Duration(sec * float64(time.Second)), nil
}

// infoInt returns field name of a "k=v,k=v" INFO value.
func infoInt(fields, name string) int64 {
	for _, f := range strings.Split(fields, ",") {
		if k, v, ok := strings.Cut(f, "="); ok && k == name {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}
