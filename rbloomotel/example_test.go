package rbloomotel_test

import (
	"log"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rbloom/rbloom"
	"github.com/rbloom/rbloom/rbloomotel"
)

// The metrics of a filter, served to Prometheus at /metrics: the calls,
// items, durations and errors of its handle, and its Info every minute.
// Spans come the same way, with WithTracerProvider and a TracerProvider
// that exports them.
func Example_prometheus() {
	// The exporter is a reader of the MeterProvider; it registers with
	// Prometheus's default registry, which promhttp.Handler serves.
	exporter, err := prometheus.New()
	if err != nil {
		log.Fatal(err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	obs, err := rbloomotel.NewObserver(rbloomotel.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}

	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	users, err := rbloom.NewCounting(rdb, "users", rbloom.Options{Capacity: 1_000_000, Observer: obs})
	if err != nil {
		log.Fatal(err)
	}
	// Info scans the whole filter: once a minute at most, whatever the
	// scrape interval.
	if _, err := obs.ObserveInfo(users, time.Minute); err != nil {
		log.Fatal(err)
	}

	http.Handle("/metrics", promhttp.Handler())
	log.Fatal(http.ListenAndServe(":2112", nil))
}
