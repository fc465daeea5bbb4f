package slotlockotel_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/internal/redistest"
	"github.com/slotlock/slotlock/slot"
	"github.com/slotlock/slotlock/slotlockotel"
)

var cluster *redistest.Cluster

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, redistest.Options{}, &cluster)) }

// rig is one test's Locker with an Observer on in-memory providers.
type rig struct {
	t      *testing.T
	client rueidis.Client
	prefix string
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	obs    *slotlockotel.Observer
}

func newRig(t *testing.T, opts ...slotlockotel.Option) *rig {
	c := redistest.Require(t, cluster)
	client, err := c.Client()
	require.NoError(t, err)
	t.Cleanup(client.Close)
	r := &rig{t: t, client: client, prefix: "otel:" + strings.ReplaceAll(t.Name(), "/", ":"),
		reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()); _ = tp.Shutdown(context.Background()) })
	r.obs, err = slotlockotel.New(append(opts, slotlockotel.WithMeterProvider(mp), slotlockotel.WithTracerProvider(tp))...)
	require.NoError(t, err)
	return r
}

func (r *rig) locker(opt slotlock.Options) *slotlock.Locker {
	opt.Prefix, opt.Observer = r.prefix, r.obs
	l, err := slotlock.New(r.client, opt)
	require.NoError(r.t, err)
	r.t.Cleanup(func() { _ = l.Close() })
	return l
}

// metrics collects every metric by name.
func (r *rig) metrics() map[string]metricdata.Aggregation {
	var rm metricdata.ResourceMetrics
	require.NoError(r.t, r.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(r.t, slotlockotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// sum returns the value of counter name at attrs (0 when absent).
func (r *rig) sum(name string, attrs ...attribute.KeyValue) int64 {
	data, ok := r.metrics()[name]
	if !ok {
		return 0
	}
	want := attribute.NewSet(attrs...)
	for _, p := range data.(metricdata.Sum[int64]).DataPoints {
		if p.Attributes.Equals(&want) {
			return p.Value
		}
	}
	return 0
}

// hist returns the data point of histogram name at attrs.
func (r *rig) hist(name string, attrs ...attribute.KeyValue) (metricdata.HistogramDataPoint[float64], bool) {
	want := attribute.NewSet(attrs...)
	data, ok := r.metrics()[name]
	if !ok {
		return metricdata.HistogramDataPoint[float64]{}, false
	}
	for _, p := range data.(metricdata.Histogram[float64]).DataPoints {
		if p.Attributes.Equals(&want) {
			return p, true
		}
	}
	return metricdata.HistogramDataPoint[float64]{}, false
}

// attrSets lists the attribute sets of metric name's data points.
func (r *rig) attrSets(name string) []string {
	var out []string
	switch d := r.metrics()[name].(type) {
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes.Encoded(attribute.DefaultEncoder()))
		}
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			out = append(out, p.Attributes.Encoded(attribute.DefaultEncoder()))
		}
	}
	return out
}

func spanAttrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

func nodesOf(t *testing.T, keys []string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	seen := map[string]bool{}
	for _, k := range keys {
		n, err := cluster.NodeForSlot(ctx, slot.KeySlot(k))
		require.NoError(t, err)
		seen[n.Addr()] = true
	}
	return len(seen)
}

var (
	lock     = slotlockotel.AttrOperation.String("lock")
	trylock  = slotlockotel.AttrOperation.String("trylock")
	acquired = slotlockotel.AttrOutcome.String("acquired")
	conflict = slotlockotel.AttrOutcome.String("conflict")
	released = slotlockotel.AttrOutcome.String("released")
)

// A Lock, a TryLock that meets it and a Release, by value: histogram
// counts per attribute set, counters, keys held, and one span each with
// the bounded attributes and no key names.
func TestMetricsAndSpans(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := r.locker(slotlock.Options{TTL: 10 * time.Second})
	other := r.locker(slotlock.Options{TTL: 10 * time.Second})
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}

	lease, err := l.Lock(ctx, keys...)
	require.NoError(t, err)
	require.Equal(t, int64(8), r.sum(slotlockotel.MetricKeysHeld))
	_, err = other.TryLock(ctx, "c", "z")
	require.ErrorIs(t, err, slotlock.ErrNotAcquired)
	require.NoError(t, lease.Release(ctx))

	p, ok := r.hist(slotlockotel.MetricAcquireDuration, lock, acquired)
	require.True(t, ok)
	require.Equal(t, uint64(1), p.Count)
	require.Positive(t, p.Sum)
	p, ok = r.hist(slotlockotel.MetricAcquireDuration, trylock, conflict)
	require.True(t, ok)
	require.Equal(t, uint64(1), p.Count)
	require.ElementsMatch(t, []string{
		"slotlock.operation=lock,slotlock.outcome=acquired",
		"slotlock.operation=trylock,slotlock.outcome=conflict",
	}, r.attrSets(slotlockotel.MetricAcquireDuration), "bounded attribute sets, no key names")
	w, ok := r.hist(slotlockotel.MetricAcquireWait, lock, acquired)
	require.True(t, ok)
	require.Equal(t, uint64(1), w.Count)
	require.Equal(t, int64(1), r.sum(slotlockotel.MetricAttempts, lock))
	require.Equal(t, int64(1), r.sum(slotlockotel.MetricAttempts, trylock))
	require.Equal(t, int64(1), r.sum(slotlockotel.MetricConflicts, trylock))
	require.Zero(t, r.sum(slotlockotel.MetricConflicts, lock))
	rel, ok := r.hist(slotlockotel.MetricReleaseDuration, released)
	require.True(t, ok)
	require.Equal(t, uint64(1), rel.Count)
	require.Zero(t, r.sum(slotlockotel.MetricKeysHeld), "released")
	require.Zero(t, r.sum(slotlockotel.MetricLeasesLost))

	spans := r.spans.Ended()
	require.Len(t, spans, 3)
	names := []string{spans[0].Name(), spans[1].Name(), spans[2].Name()}
	require.Equal(t, []string{"slotlock.Lock", "slotlock.TryLock", "slotlock.Release"}, names)
	a := spanAttrs(spans[0])
	require.Equal(t, int64(8), a[slotlockotel.AttrKeys].AsInt64())
	require.Equal(t, int64(nodesOf(t, keys)), a[slotlockotel.AttrNodes].AsInt64())
	require.Equal(t, "acquired", a[slotlockotel.AttrOutcome].AsString())
	require.Equal(t, int64(1), a[slotlockotel.AttrAttempts].AsInt64())
	require.Equal(t, "lua", a[slotlockotel.AttrStrategy].AsString())
	require.NotContains(t, a, slotlockotel.AttrKeyNames)
	require.True(t, spans[0].EndTime().After(spans[0].StartTime()))
	b := spanAttrs(spans[1])
	require.Equal(t, "conflict", b[slotlockotel.AttrOutcome].AsString())
	require.Equal(t, int64(2), b[slotlockotel.AttrKeys].AsInt64())
	require.Equal(t, int64(1), b[slotlockotel.AttrConflicts].AsInt64())
	require.Equal(t, codes.Unset, spans[1].Status().Code, "a conflict is an answer, not a failure")
	c := spanAttrs(spans[2])
	require.Equal(t, "released", c[slotlockotel.AttrOutcome].AsString())
	require.Equal(t, int64(8), c[slotlockotel.AttrKeys].AsInt64())
}

// Renewals and a lost lease: the watchdog's rounds count renewed leases;
// a lease whose key an operator deletes counts as lost and leaves the
// keys-held gauge.
func TestRenewalsAndLoss(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := r.locker(slotlock.Options{TTL: time.Second})
	lease, err := l.Lock(ctx, "x", "y", "z")
	require.NoError(t, err)
	renewed := slotlockotel.AttrOutcome.String("renewed")
	require.Eventually(t, func() bool { return r.sum(slotlockotel.MetricRenewals, renewed) >= 3 }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, int64(3), r.sum(slotlockotel.MetricKeysHeld))
	names, _ := slot.NewNamer(r.prefix)
	require.NoError(t, r.client.Do(ctx, r.client.B().Del().Key(names.LockKey("y")).Build()).Error())
	<-lease.Done()
	require.Equal(t, int64(1), r.sum(slotlockotel.MetricLeasesLost))
	require.Zero(t, r.sum(slotlockotel.MetricKeysHeld))
	require.ErrorIs(t, lease.Release(ctx), slotlock.ErrNotHeld)
	p, ok := r.hist(slotlockotel.MetricReleaseDuration, slotlockotel.AttrOutcome.String("lost"))
	require.True(t, ok)
	require.Equal(t, uint64(1), p.Count)
	sp := r.spans.Ended()
	last := sp[len(sp)-1]
	require.Equal(t, "slotlock.Release", last.Name())
	require.Equal(t, codes.Error, last.Status().Code)
}

// With WithKeyNames, spans carry the keys; the span of a Lock is a child of
// the caller's span; a Lock that times out is an error span with its wait.
func TestKeyNamesParentAndTimeout(t *testing.T) {
	r := newRig(t, slotlockotel.WithKeyNames())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := r.locker(slotlock.Options{})
	other := r.locker(slotlock.Options{})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	pctx, parent := tp.Tracer("test").Start(ctx, "job")
	lease, err := l.Lock(pctx, "k1", "k2")
	require.NoError(t, err)
	parent.End()
	tctx, tcancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer tcancel()
	_, err = other.Lock(tctx, "k2")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, lease.Release(ctx))

	spans := r.spans.Ended()
	var lockSpan, timeoutSpan sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == "slotlock.Lock" && lockSpan == nil {
			lockSpan = s
		} else if s.Name() == "slotlock.Lock" {
			timeoutSpan = s
		}
	}
	require.NotNil(t, lockSpan)
	require.Equal(t, parent.SpanContext().SpanID(), lockSpan.Parent().SpanID())
	require.Equal(t, []string{"k1", "k2"}, spanAttrs(lockSpan)[slotlockotel.AttrKeyNames].AsStringSlice())
	require.NotNil(t, timeoutSpan)
	a := spanAttrs(timeoutSpan)
	require.Equal(t, "timeout", a[slotlockotel.AttrOutcome].AsString())
	require.GreaterOrEqual(t, a[slotlockotel.AttrWait].AsFloat64(), 100.0)
	require.Equal(t, codes.Error, timeoutSpan.Status().Code)
	p, ok := r.hist(slotlockotel.MetricAcquireWait, lock, slotlockotel.AttrOutcome.String("timeout"))
	require.True(t, ok)
	require.Equal(t, uint64(1), p.Count)
	require.GreaterOrEqual(t, p.Sum, 0.1)
}

// Rollbacks by outcome: a TryLock that meets a held key rolls back what it
// took (ok); with no time for its rollback, the rollback fails (failed).
func TestRollbacks(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	holder := r.locker(slotlock.Options{})
	keys := make([]string, 10)
	for i := range keys {
		keys[i] = fmt.Sprintf("rb:%d:%d", time.Now().UnixNano(), i) // this run's: a failed rollback leaves them for 2 s
	}
	held, err := holder.Lock(ctx, keys[5])
	require.NoError(t, err)
	defer held.Release(ctx)
	ok, failed := slotlockotel.AttrOutcome.String("ok"), slotlockotel.AttrOutcome.String("failed")

	_, err = r.locker(slotlock.Options{}).TryLock(ctx, keys...)
	require.ErrorIs(t, err, slotlock.ErrNotAcquired)
	require.Equal(t, int64(1), r.sum(slotlockotel.MetricRollbacks, ok))
	require.Zero(t, r.sum(slotlockotel.MetricRollbacks, failed))

	_, err = r.locker(slotlock.Options{TTL: 2 * time.Second, CleanupTimeout: time.Nanosecond}).TryLock(ctx, keys...)
	require.ErrorIs(t, err, slotlock.ErrNotAcquired)
	require.Equal(t, int64(1), r.sum(slotlockotel.MetricRollbacks, ok))
	require.Equal(t, int64(1), r.sum(slotlockotel.MetricRollbacks, failed))
}
