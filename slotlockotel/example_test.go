package slotlockotel_test

import (
	"context"
	"log"

	"github.com/redis/rueidis"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/slotlock/slotlock"
	"github.com/slotlock/slotlock/slotlockotel"
)

// An Observer on the application's providers (here a meter provider with
// a manual reader; in production, the one the OTLP exporter feeds) goes
// into the Locker's Options.
func ExampleNew() {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	obs, err := slotlockotel.New(slotlockotel.WithMeterProvider(mp)) // tracer: the global provider
	if err != nil {
		log.Fatal(err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:7000"}})
	if err != nil {
		log.Print(err) // no cluster here
		return
	}
	defer client.Close()
	locker, err := slotlock.New(client, slotlock.Options{Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	defer locker.Close()
	lease, err := locker.Lock(context.Background(), "order:42", "stock:7")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
}
