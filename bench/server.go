package bench

import (
	"context"
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

// serverSnapshot is what the nodes had done by some moment: INFO
// commandstats of the masters and INFO cpu of every node. Two snapshots
// make a ServerStats. A difference, not CONFIG RESETSTAT: on a cluster the
// user already has, resetting its statistics would be rude.
type serverSnapshot struct {
	cmds map[string][2]int64 // calls, usec
	cpu  time.Duration
}

func (e *Env) snapshot(ctx context.Context) (serverSnapshot, error) {
	s := serverSnapshot{cmds: map[string][2]int64{}}
	for _, m := range e.masters {
		text, err := m.Info(ctx, "commandstats")
		if err != nil {
			return s, err
		}
		for _, line := range strings.Split(text, "\n") {
			name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
			cmd, isCmd := strings.CutPrefix(name, "cmdstat_")
			if !ok || !isCmd {
				continue
			}
			v := s.cmds[cmd]
			s.cmds[cmd] = [2]int64{v[0] + infoInt(fields, "calls"), v[1] + infoInt(fields, "usec")}
		}
	}
	var err error
	s.cpu, err = e.ServerCPU(ctx)
	return s, err
}

// since is what the nodes did between then and s.
func (s serverSnapshot) since(then serverSnapshot) ServerStats {
	out := ServerStats{ByCommand: map[string]int64{}, CPU: s.cpu - then.cpu}
	for cmd, v := range s.cmds {
		if adminCommands[strings.SplitN(cmd, "|", 2)[0]] {
			continue
		}
		calls, usec := v[0]-then.cmds[cmd][0], v[1]-then.cmds[cmd][1]
		if calls == 0 {
			continue
		}
		out.Calls += calls
		out.Usec += usec
		out.ByCommand[cmd] += calls
		if cmd == "evalsha" || cmd == "eval" {
			out.ScriptCalls += calls
			out.ScriptUsec += usec
		}
	}
	return out
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
