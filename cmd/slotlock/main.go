// Command slotlock is the operator's and the shell script's window on
// slotlock locks in a Redis Cluster (or a single server):
//
//	slotlock keyslot KEY...             slot, owning node and lock key of each key
//	slotlock inspect [--json] KEY...    who holds each key, until when, who waits
//	slotlock inspect --permits [--json] RESOURCE...
//	                                    who holds units of each counted resource
//	slotlock run --keys a,b [--ttl 30s] [--wait 10s] -- CMD [ARGS...]
//	                                    flock(1) for the cluster: hold the keys while CMD runs
//	slotlock release --force [--yes] KEY...
//	                                    delete locks by hand (operator override)
//
// Every subcommand takes the connection flags (--addrs, --user, --password
// or SLOTLOCK_PASSWORD, --tls...) and --prefix. Exit codes are listed in
// exitUsage and below, and in docs/operability.md.
//
// Install with
//
//	go install github.com/slotlock/slotlock/cmd/slotlock@latest
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/slotlock/slotlock"
)

// Exit codes. A script tells "the keys are busy" from "Redis is down" from
// "the lock was lost under the command" by these; run otherwise returns
// the command's own status.
const (
	exitOK          = 0
	exitUsage       = 64 // bad flags or input (EX_USAGE): nothing was sent
	exitUnavailable = 69 // Redis unreachable or an error reply (EX_UNAVAILABLE): nothing is held
	exitNotAcquired = 75 // run: the keys stayed busy past --wait (EX_TEMPFAIL): the command did not run
	exitLost        = 76 // run: the lease was lost; the command got SIGTERM (and SIGKILL after --grace)
	exitAborted     = 77 // release: not confirmed; nothing deleted
	exitCannotRun   = 126
	exitNotFound    = 127
)

const usage = `usage: slotlock COMMAND [flags] ...

commands:
  keyslot KEY...                        slot, owning master and lock key of each key
  inspect [--json] KEY...               holder, TTL, holds, fencing token and waiters of each key
  inspect --permits [--json] RESOURCE...  units in use, limit and holders of each counted resource
  run --keys K1,K2 [--ttl 30s] [--wait 10s] [--grace 10s] -- CMD [ARGS...]
                                        take every key (all or nothing), run CMD while the
                                        lease is renewed, release on exit; exit with CMD's status
  release --force [--yes] KEY...        delete the locks of KEYs whoever holds them

connection flags (every command; slotlock COMMAND -h lists them):
  --addrs host:port,...  seed nodes (default $SLOTLOCK_ADDRS, else 127.0.0.1:6379)
  --user, --password     ACL user and password (better: $SLOTLOCK_PASSWORD)
  --tls, --tls-ca FILE, --tls-cert FILE, --tls-key FILE, --tls-server-name NAME
  --prefix P             slotlock's key prefix (default "slotlock")
  --timeout D            dial and command timeout (default 5s)

exit codes:
  0    success (run: the command exited 0)
  64   bad flags or input; nothing sent
  69   Redis unreachable or refused a command; nothing held
  75   run: keys still busy when --wait ran out; the command did not run
  76   run: the lease was lost while the command ran; it got SIGTERM, then SIGKILL after --grace
  77   release: not confirmed; nothing deleted
  126  run: the command could not be started; 127: it was not found
  other run: the command's own status (128+N if a signal N ended it)
`

func main() {
	os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// Main runs the command line args and returns the exit code.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "keyslot":
		return keyslotCmd(rest, stdout, stderr)
	case "inspect":
		return inspectCmd(rest, stdout, stderr)
	case "run":
		return runCmd(rest, stdin, stdout, stderr)
	case "release":
		return releaseCmd(rest, stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "slotlock: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

// conn holds the connection flags every command takes.
type conn struct {
	addrs, user, password, prefix       string
	tls                                 bool
	tlsCA, tlsCert, tlsKey, tlsServerNm string
	timeout                             time.Duration
}

func newFlags(name string, stderr io.Writer) (*flag.FlagSet, *conn) {
	fs := flag.NewFlagSet("slotlock "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := &conn{}
	def := os.Getenv("SLOTLOCK_ADDRS")
	if def == "" {
		def = "127.0.0.1:6379"
	}
	fs.StringVar(&c.addrs, "addrs", def, "comma-separated seed nodes, host:port ($SLOTLOCK_ADDRS)")
	fs.StringVar(&c.user, "user", os.Getenv("SLOTLOCK_USER"), "ACL user ($SLOTLOCK_USER)")
	fs.StringVar(&c.password, "password", "", "ACL password (prefer $SLOTLOCK_PASSWORD: flags show in ps)")
	fs.StringVar(&c.prefix, "prefix", "", `slotlock's key prefix (Options.Prefix; "" means "slotlock")`)
	fs.BoolVar(&c.tls, "tls", false, "connect with TLS (system roots unless --tls-ca)")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM file of the CA that signed the servers' certificates (implies --tls)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "PEM client certificate (implies --tls; needs --tls-key)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "PEM client key")
	fs.StringVar(&c.tlsServerNm, "tls-server-name", "", "server name to verify instead of the address's host")
	fs.DurationVar(&c.timeout, "timeout", 5*time.Second, "dial and command timeout")
	return fs, c
}

// usageError is bad input: reported with exitUsage, before anything is
// sent.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// parse parses args with fs, mapping -h to exit 0 and errors to exitUsage.
func parse(fs *flag.FlagSet, args []string) (int, bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false // the flag package printed why
	}
	return 0, true
}

// client connects; the error says which addresses could not be reached.
func (c *conn) client() (rueidis.Client, error) {
	var addrs []string
	for _, a := range strings.Split(c.addrs, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, usagef("--addrs: %q is not host:port", a)
		}
		addrs = append(addrs, a)
	}
	if len(addrs) == 0 {
		return nil, usagef("--addrs: no address")
	}
	if c.password == "" {
		c.password = os.Getenv("SLOTLOCK_PASSWORD")
	}
	opt := rueidis.ClientOption{
		InitAddress:      addrs,
		Username:         c.user,
		Password:         c.password,
		Dialer:           net.Dialer{Timeout: c.timeout},
		ConnWriteTimeout: c.timeout,
	}
	if c.tls || c.tlsCA != "" || c.tlsCert != "" {
		cfg, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opt.TLSConfig = cfg
	}
	cl, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to %s: %w", strings.Join(addrs, ","), err)
	}
	return cl, nil
}

func (c *conn) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.tlsServerNm}
	if c.tlsCA != "" {
		pem, err := os.ReadFile(c.tlsCA)
		if err != nil {
			return nil, usagef("--tls-ca: %v", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usagef("--tls-ca: no certificate in %s", c.tlsCA)
		}
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return nil, usagef("--tls-cert and --tls-key go together")
	}
	if c.tlsCert != "" {
		pair, err := tls.LoadX509KeyPair(c.tlsCert, c.tlsKey)
		if err != nil {
			return nil, usagef("--tls-cert/--tls-key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// locker connects and makes a Locker with opt (Prefix from the flags).
// The returned close ends both.
func (c *conn) locker(opt slotlock.Options) (*slotlock.Locker, func(), error) {
	cl, err := c.client()
	if err != nil {
		return nil, nil, err
	}
	l, err := c.lockerOn(cl, opt)
	if err != nil {
		cl.Close()
		return nil, nil, err
	}
	return l, func() { _ = l.Close(); cl.Close() }, nil
}

// lockerOn is a Locker with the command's prefix over a client the caller
// keeps (and closes).
func (c *conn) lockerOn(cl rueidis.Client, opt slotlock.Options) (*slotlock.Locker, error) {
	opt.Prefix = c.prefix
	l, err := slotlock.New(cl, opt)
	if err != nil {
		return nil, usagef("%v", err)
	}
	return l, nil
}

// checkKeys refuses an empty list or an empty key, naming it.
func checkKeys(keys []string) error {
	if len(keys) == 0 {
		return usagef("no keys")
	}
	for i, k := range keys {
		if k == "" {
			return usagef("key %d of %d is empty", i+1, len(keys))
		}
	}
	return nil
}

// fail prints err and returns its exit code: exitUsage for bad input,
// exitUnavailable otherwise.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "slotlock: %v\n", strings.TrimPrefix(err.Error(), "slotlock: "))
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, slotlock.ErrInvalid) {
		return exitUsage
	}
	return exitUnavailable
}

// opContext bounds one command's Redis work by --timeout.
func (c *conn) opContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}
