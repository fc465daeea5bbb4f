package slotlockotel_test

import (
	"context"
	"fmt"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slotlockotel"
)

// An Observer on the application's providers (here a meter provider with
// a manual reader; in production, the one the OTLP exporter feeds; the
// tracer is the global provider's) goes into the Locker's Options.
func ExampleNew() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := slotlockotel.New(slotlockotel.WithMeterProvider(mp))
	if err != nil {
		panic(err)
	}
	client, err := cluster.Client() // rueidis.NewClient(...) in a service
	if err != nil {
		panic(err)
	}
	defer client.Close()
	locker, err := slotlock.New(client, slotlock.Options{Prefix: "example-otel", Observer: obs})
	if err != nil {
		panic(err)
	}
	defer locker.Close()
	ctx := context.Background()
	lease, err := locker.Lock(ctx, "order:42", "stock:7")
	if err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if m.Name == slotlockotel.MetricKeysHeld {
			fmt.Println("keys held:", m.Data.(metricdata.Sum[int64]).DataPoints[0].Value)
		}
	}
	_ = lease.Release(ctx)
	// Output: keys held: 2
}
