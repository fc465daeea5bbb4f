// Package slotlockotel reports what a slotlock.Locker does through
// OpenTelemetry: metrics (acquire latency and wait histograms, attempts,
// conflicts, rollbacks, renewals, lost leases, keys held) and a span per
// Lock, TryLock and Release. It is a module of its own, like rueidis's
// rueidisotel, so that users of slotlock who do not use OpenTelemetry
// never inherit it.
//
//	obs, err := slotlockotel.New() // the global providers, or WithMeterProvider/WithTracerProvider
//	locker, err := slotlock.New(client, slotlock.Options{Observer: obs})
//
// Attributes are bounded: the operation, the outcome, the strategy, and on
// spans the key and node counts. Key names go on spans only with
// WithKeyNames (they are unbounded and may be private); they never go on
// metrics.
package slotlockotel

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/slotlock/slotlock"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/slotlock/slotlock/slotlockotel"

// Attribute keys.
const (
	AttrOperation = attribute.Key("slotlock.operation") // lock, trylock, release
	AttrOutcome   = attribute.Key("slotlock.outcome")   // slotlock.Outcome, or renewed/lost/failed for renewals
	AttrStrategy  = attribute.Key("slotlock.strategy")  // lua, pipeline
	AttrKeys      = attribute.Key("slotlock.keys")      // distinct keys (spans)
	AttrNodes     = attribute.Key("slotlock.nodes")     // masters involved (spans)
	AttrAttempts  = attribute.Key("slotlock.attempts")  // spans of Lock and TryLock
	AttrConflicts = attribute.Key("slotlock.conflicts") // spans of Lock and TryLock
	AttrWait      = attribute.Key("slotlock.wait_ms")   // spans of Lock and TryLock
	AttrKeyNames  = attribute.Key("slotlock.key_names") // spans, WithKeyNames only
)

// MaxKeyNames bounds the key names a span carries with WithKeyNames.
const MaxKeyNames = 32

// Metric names.
const (
	MetricAcquireDuration = "slotlock.acquire.duration"  // histogram, s: operation, outcome
	MetricAcquireWait     = "slotlock.acquire.wait"      // histogram, s: operation, outcome
	MetricAttempts        = "slotlock.acquire.attempts"  // counter: operation
	MetricConflicts       = "slotlock.acquire.conflicts" // counter: operation
	MetricRollbacks       = "slotlock.rollbacks"         // counter: outcome (ok, failed)
	MetricReleaseDuration = "slotlock.release.duration"  // histogram, s: outcome
	MetricRenewals        = "slotlock.renewals"          // counter of leases: outcome (renewed, lost, failed)
	MetricLeasesLost      = "slotlock.leases.lost"       // counter
	MetricKeysHeld        = "slotlock.keys.held"         // up-down counter: keys held by live leases
)

// latencyBounds are the histogram buckets, in seconds: from half a
// millisecond (an uncontended lock on a LAN) to a minute (a long wait).
var latencyBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

type config struct {
	mp       metric.MeterProvider
	tp       trace.TracerProvider
	keyNames bool
}

// Option configures New.
type Option func(*config)

// WithMeterProvider sets the meter provider (default: otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option { return func(c *config) { c.mp = mp } }

// WithTracerProvider sets the tracer provider (default: otel.GetTracerProvider()).
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tp = tp } }

// WithKeyNames puts the user keys (at most MaxKeyNames) on spans. Off by
// default: key names are unbounded and may carry private data.
func WithKeyNames() Option { return func(c *config) { c.keyNames = true } }

// Observer is a slotlock.Observer that records metrics and spans. Make
// one per process (or per Locker) and set it in slotlock.Options.Observer.
type Observer struct {
	tracer   trace.Tracer
	keyNames bool

	acquireDur, acquireWait, releaseDur metric.Float64Histogram
	attempts, conflicts, rollbacks      metric.Int64Counter
	renewals, lost                      metric.Int64Counter
	held                                metric.Int64UpDownCounter
}

var _ slotlock.Observer = (*Observer)(nil)

// New returns an Observer on the configured (or global) providers.
func New(opts ...Option) (*Observer, error) {
	c := config{}
	for _, o := range opts {
		o(&c)
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	m := c.mp.Meter(ScopeName)
	o := &Observer{tracer: c.tp.Tracer(ScopeName), keyNames: c.keyNames}
	var err error
	hist := func(name, desc string) metric.Float64Histogram {
		if err != nil {
			return nil
		}
		var h metric.Float64Histogram
		h, err = m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
			metric.WithExplicitBucketBoundaries(latencyBounds...))
		return h
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var x metric.Int64Counter
		x, err = m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		return x
	}
	o.acquireDur = hist(MetricAcquireDuration, "Duration of Lock and TryLock calls, from call to return.")
	o.acquireWait = hist(MetricAcquireWait, "Time Lock and TryLock spent waiting for keys held by others.")
	o.releaseDur = hist(MetricReleaseDuration, "Duration of Release calls.")
	o.attempts = counter(MetricAttempts, "{attempt}", "Acquire attempts sent to Redis.")
	o.conflicts = counter(MetricConflicts, "{key}", "Keys found held by others, summed over attempts.")
	o.rollbacks = counter(MetricRollbacks, "{rollback}", "Owner-checked releases of keys an acquisition had taken (trims and rollbacks); outcome failed: a rollback could not settle every key.")
	o.renewals = counter(MetricRenewals, "{lease}", "Lease renewals by the watchdog, by outcome.")
	o.lost = counter(MetricLeasesLost, "{lease}", "Leases that ended lost.")
	if err == nil {
		o.held, err = m.Int64UpDownCounter(MetricKeysHeld, metric.WithUnit("{key}"),
			metric.WithDescription("Keys held by live leases."))
	}
	if err != nil {
		return nil, err
	}
	return o, nil
}

func operation(wait bool) string {
	if wait {
		return "lock"
	}
	return "trylock"
}

// failed says whether a span of this outcome gets an error status: not
// for a TryLock that met a conflict or a call its caller cancelled, which
// are answers, not failures.
func failed(o slotlock.Outcome) bool {
	switch o {
	case slotlock.OutcomeAcquired, slotlock.OutcomeReleased, slotlock.OutcomeConflict, slotlock.OutcomeCanceled:
		return false
	}
	return true
}

// Acquired implements slotlock.Observer.
func (o *Observer) Acquired(e slotlock.AcquireEvent) {
	ctx := e.Ctx
	op := operation(e.Wait)
	set := metric.WithAttributeSet(attribute.NewSet(AttrOperation.String(op), AttrOutcome.String(string(e.Outcome))))
	o.acquireDur.Record(ctx, e.Latency.Seconds(), set)
	o.acquireWait.Record(ctx, e.Waited.Seconds(), set)
	opOnly := metric.WithAttributeSet(attribute.NewSet(AttrOperation.String(op)))
	if e.Attempts > 0 {
		o.attempts.Add(ctx, int64(e.Attempts), opOnly)
	}
	if e.Conflicts > 0 {
		o.conflicts.Add(ctx, int64(e.Conflicts), opOnly)
	}
	ok := e.Rollbacks
	if e.RollbackErr != nil {
		ok-- // the last rollback is the one that failed
		o.rollbacks.Add(ctx, 1, metric.WithAttributes(AttrOutcome.String("failed")))
	}
	if ok > 0 {
		o.rollbacks.Add(ctx, int64(ok), metric.WithAttributes(AttrOutcome.String("ok")))
	}
	if e.Outcome == slotlock.OutcomeAcquired {
		o.held.Add(ctx, int64(e.KeyCount))
	}

	name := "slotlock.TryLock"
	if e.Wait {
		name = "slotlock.Lock"
	}
	attrs := []attribute.KeyValue{
		AttrOutcome.String(string(e.Outcome)), AttrKeys.Int(e.KeyCount), AttrNodes.Int(e.Nodes),
		AttrAttempts.Int(e.Attempts), AttrConflicts.Int(e.Conflicts), AttrWait.Float64(float64(e.Waited) / float64(time.Millisecond)),
	}
	if e.Attempts > 0 {
		attrs = append(attrs, AttrStrategy.String(e.Strategy.String()))
	}
	if o.keyNames {
		attrs = append(attrs, AttrKeyNames.StringSlice(keyNames(e.Keys)))
	}
	o.span(ctx, name, e.Start, e.Latency, attrs, e.Outcome, e.Err)
}

// Released implements slotlock.Observer.
func (o *Observer) Released(e slotlock.ReleaseEvent) {
	ctx := e.Ctx
	o.releaseDur.Record(ctx, e.Latency.Seconds(), metric.WithAttributes(AttrOutcome.String(string(e.Outcome))))
	attrs := []attribute.KeyValue{AttrOutcome.String(string(e.Outcome)), AttrKeys.Int(e.KeyCount), AttrNodes.Int(e.Nodes)}
	if o.keyNames {
		attrs = append(attrs, AttrKeyNames.StringSlice(keyNames(e.Lease.Keys())))
	}
	o.span(ctx, "slotlock.Release", e.Start, e.Latency, attrs, e.Outcome, e.Err)
}

// Renewed implements slotlock.Observer.
func (o *Observer) Renewed(e slotlock.RenewEvent) {
	ctx := context.Background() // the watchdog's own work: no caller
	for _, c := range []struct {
		outcome string
		n       int
	}{{"renewed", e.Renewed}, {"lost", e.Lost}, {"failed", e.Failed}} {
		if c.n > 0 {
			o.renewals.Add(ctx, int64(c.n), metric.WithAttributes(AttrOutcome.String(c.outcome)))
		}
	}
}

// Ended implements slotlock.Observer.
func (o *Observer) Ended(e slotlock.EndEvent) {
	ctx := context.Background()
	o.held.Add(ctx, -int64(e.KeyCount))
	if e.Lost {
		o.lost.Add(ctx, 1)
	}
}

// span records a finished operation as a span, with its own start and end
// times (the Observer learns of an operation when it is over).
func (o *Observer) span(ctx context.Context, name string, start time.Time, d time.Duration, attrs []attribute.KeyValue, out slotlock.Outcome, err error) {
	if ctx == nil {
		ctx = context.Background()
	}
	_, sp := o.tracer.Start(ctx, name, trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attrs...))
	if failed(out) && err != nil {
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End(trace.WithTimestamp(start.Add(d)))
}

func keyNames(keys []string) []string {
	if len(keys) > MaxKeyNames {
		keys = keys[:MaxKeyNames]
	}
	return keys
}
