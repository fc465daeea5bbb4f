package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Server identifies the server a cluster runs, as the server itself says in
// INFO server, so that a test log, a bench report or a compatibility row
// names what was tested rather than what was meant to be.
type Server struct {
	// Name is "redis" or "valkey": Valkey's server_name field; Redis has
	// no such field and is "redis".
	Name string
	// Version is the server's own version: valkey_version on Valkey, whose
	// redis_version stays at 7.2.4 for the sake of clients that test it.
	Version string
}

func (s Server) String() string { return s.Name + " " + s.Version }

// ParseServer reads the identity from the text of an INFO server reply.
func ParseServer(info string) (Server, error) {
	fields := map[string]string{}
	for line := range strings.SplitSeq(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	s := Server{Name: fields["server_name"]}
	if s.Name == "" {
		s.Name = "redis"
	}
	s.Version = fields[s.Name+"_version"]
	if s.Version == "" {
		s.Version = fields["redis_version"]
	}
	if s.Version == "" {
		return Server{}, errors.New("redistest: INFO server has no version field")
	}
	return s, nil
}

// Server returns the identity of the server the first running node runs;
// every node of a cluster runs the same binary.
func (c *Cluster) Server(ctx context.Context) (Server, error) {
	if c.startErr != nil {
		return Server{}, c.startErr
	}
	live := c.liveNodes()
	if len(live) == 0 {
		return Server{}, errors.New("redistest: no node is running")
	}
	info, err := live[0].Info(ctx, "server")
	if err != nil {
		return Server{}, err
	}
	s, err := ParseServer(info)
	if err != nil {
		return Server{}, fmt.Errorf("%w (%s)", err, live[0].Addr())
	}
	return s, nil
}

// HasCommand reports whether the server knows the command name (COMMAND
// INFO answers nil for an unknown one), for tests of commands that only
// some servers have: they run where it is known and say NOT RUN elsewhere.
func (c *Cluster) HasCommand(ctx context.Context, name string) (bool, error) {
	if c.startErr != nil {
		return false, c.startErr
	}
	live := c.liveNodes()
	if len(live) == 0 {
		return false, errors.New("redistest: no node is running")
	}
	res, err := live[0].Do(ctx, "COMMAND", "INFO", name).ToArray()
	if err != nil {
		return false, fmt.Errorf("redistest: COMMAND INFO %s on %s: %w", name, live[0].Addr(), err)
	}
	return len(res) == 1 && !res[0].IsNil(), nil
}

// Describe is one line for the start of a test run or a report: the server
// as it identifies itself, the backend, and the binary or image it came
// from.
func (c *Cluster) Describe(ctx context.Context) string {
	s, err := c.Server(ctx)
	id := s.String()
	if err != nil {
		id = "server unknown (" + err.Error() + ")"
	}
	shape := "standalone"
	if !c.standalone {
		shape = fmt.Sprintf("%d masters, %d replicas each", c.opt.Masters, c.opt.Replicas)
	}
	src := ""
	if c.launcher != nil {
		src = ", from " + c.launcher.source()
	}
	return fmt.Sprintf("%s, %s backend, %s%s", id, c.backend, shape, src)
}
