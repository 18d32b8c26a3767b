// Package metrics exposes the plugin's Prometheus metrics: one counter,
// latency histogram and in-flight gauge per CSI method, a latency
// histogram of Ceph operations fed through rbd.Observer, and the
// controller's background work (running tasks, sweeps, what was reclaimed,
// the KEK rotation), and the fences of nodes detached while they still
// had a volume open.
//
// Nothing here is global: New registers its collectors on the registry it
// is given, and Handler serves whatever that registry gathers.
package metrics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// Namespace prefixes every metric name.
const Namespace = "rbdcsi"

// Metrics is the rbd.Observer the Ceph backend reports each operation to
// (the interface lives with the storage contract, which has no cgo).
var _ rbd.Observer = (*Metrics)(nil)

// Metrics holds the plugin's collectors.
type Metrics struct {
	calls    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inFlight *prometheus.GaugeVec
	cephOps  *prometheus.HistogramVec

	// The controller's work off the request path (upkeep.Observer).
	background *prometheus.GaugeVec
	sweeps     *prometheus.CounterVec
	reclaimed  *prometheus.CounterVec
	trims      *prometheus.CounterVec
	trimmed    prometheus.Counter
	// The KEK rotation (upkeep.Observer).
	rewraps         *prometheus.CounterVec
	rotationPasses  *prometheus.CounterVec
	rotationPending *prometheus.GaugeVec
	// Fences: made by the controller (upkeep.Observer), lifted by the
	// node (node.LiftObserver).
	fences *prometheus.CounterVec
	lifts  *prometheus.CounterVec
}

// latencyBuckets span a quick Identity call (~ms) to a slow flatten or
// mkfs (minutes): CSI sidecars time calls out after a few minutes at most.
var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

// NewRegistry returns a registry with the Go runtime and process
// collectors, ready for New.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// New creates the collectors and registers them on reg.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "csi_requests_total",
			Help:      "CSI calls handled, by gRPC method and status code.",
		}, []string{"method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "csi_request_duration_seconds",
			Help:      "Time to handle a CSI call, by gRPC method and status code.",
			Buckets:   latencyBuckets,
		}, []string{"method", "code"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "csi_requests_in_flight",
			Help:      "CSI calls being handled now, by gRPC method.",
		}, []string{"method"}),
		cephOps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "ceph_operation_duration_seconds",
			Help:      "Time of one Ceph operation, by operation and result (success or error).",
			Buckets:   latencyBuckets,
		}, []string{"operation", "result"}),
		background: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "background_tasks",
			Help:      "Controller tasks running off the request path, by kind (flatten, sweep, kek-rotation).",
		}, []string{"kind"}),
		sweeps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "sweeps_total",
			Help:      "Sweeps of a pool for what crashed or abandoned requests left, by result (success or error).",
		}, []string{"result"}),
		trims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "fstrim_total",
			Help:      "Node: trims of staged filesystems, by result (ok, unsupported: the mapper passes no discards, busy: skipped for a running request, error).",
		}, []string{"result"}),
		trimmed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "fstrim_bytes_total",
			Help:      "Node: bytes fstrim reported trimmed, that is, handed back to Ceph as discards.",
		}),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "reclaimed_total",
			Help:      "Leftovers the controller gave back to the pool, by what they were (hidden-image, half-removed-image, unfinished-image, temporary-snapshot, snapshot-claim, expired-fence: a fence record of a node that never lifted it).",
		}, []string{"what"}),
		rewraps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "kek_rewraps_total",
			Help:      "Data keys of encrypted volumes the KEK rotation re-wrapped to their KMS's current KEK, by KMS ID (unknown: a malformed record, or a KMS the configuration lacks) and result (success, or error: the volume keeps its old wrapping).",
		}, []string{"kms", "result"}),
		rotationPasses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "kek_rotation_passes_total",
			Help:      "Passes of the KEK rotation over every pool, by result (success, or error: part of it failed; the log says why).",
		}, []string{"result"}),
		rotationPending: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace,
			Name:      "kek_rotation_pending_volumes",
			Help:      "After the last KEK rotation pass, by KMS ID: encrypted volumes whose data key is still wrapped by another KEK than the current one, or could not be checked. 0: the KMS's old KEKs may be removed.",
		}, []string{"kms"}),
		fences: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "fences_total",
			Help:      "Controller: nodes fenced (their clients blocklisted) because they still had a single-node volume open when it was detached from them, by result (success, or error: the volume stayed attached and the detach is retried).",
		}, []string{"result"}),
		lifts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace,
			Name:      "fence_lifts_total",
			Help:      "Node: fences of this node lifted once it unstaged the volume, by result (success, or error: the entries stay until they expire).",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.latency, m.inFlight, m.cephOps, m.background, m.sweeps, m.reclaimed, m.trims, m.trimmed,
		m.rewraps, m.rotationPasses, m.rotationPending, m.fences, m.lifts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// UnaryInterceptor counts and times every unary call. The method label is
// the short name (CreateVolume, NodeStageVolume, ...), the code label the
// gRPC status code name (OK, NotFound, ...).
func (m *Metrics) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := path.Base(info.FullMethod)
		g := m.inFlight.WithLabelValues(method)
		g.Inc()
		defer g.Dec()
		start := time.Now()
		resp, err := handler(ctx, req)
		code := status.Code(err).String()
		m.calls.WithLabelValues(method, code).Inc()
		m.latency.WithLabelValues(method, code).Observe(time.Since(start).Seconds())
		return resp, err
	}
}

// ObserveCephOp records one Ceph operation (rbd.Observer).
func (m *Metrics) ObserveCephOp(op string, took time.Duration, err error) {
	m.cephOps.WithLabelValues(op, result(err)).Observe(took.Seconds())
}

// BackgroundTasks moves the gauge of running background tasks of a kind;
// with Swept, Reclaimed, Rewrapped and RotationPassed, Metrics is a
// upkeep.Observer.
func (m *Metrics) BackgroundTasks(kind string, delta int) {
	m.background.WithLabelValues(kind).Add(float64(delta))
}

// Swept counts one sweep of a pool.
func (m *Metrics) Swept(err error) { m.sweeps.WithLabelValues(result(err)).Inc() }

// Reclaimed counts one leftover removed.
func (m *Metrics) Reclaimed(what string) { m.reclaimed.WithLabelValues(what).Inc() }

// Rewrapped counts one data key re-wrapped by the KEK rotation, or not.
func (m *Metrics) Rewrapped(kmsID string, err error) {
	m.rewraps.WithLabelValues(kmsID, result(err)).Inc()
}

// RotationPassed counts one KEK rotation pass and sets the pending gauge
// of each KMS it reports (a pass that could not start reports none, and
// the gauges keep the last pass's counts).
func (m *Metrics) RotationPassed(pending map[string]int, err error) {
	m.rotationPasses.WithLabelValues(result(err)).Inc()
	if pending == nil {
		return
	}
	m.rotationPending.Reset()
	for kmsID, n := range pending {
		m.rotationPending.WithLabelValues(kmsID).Set(float64(n))
	}
}

// Fenced counts one fence the controller made, or failed to.
func (m *Metrics) Fenced(err error) { m.fences.WithLabelValues(result(err)).Inc() }

// FenceLifted counts one fence the node lifted, or failed to
// (node.LiftObserver).
func (m *Metrics) FenceLifted(err error) { m.lifts.WithLabelValues(result(err)).Inc() }

// Trimmed counts one volume's trim on the node (node.TrimObserver).
func (m *Metrics) Trimmed(result string, bytes uint64) {
	m.trims.WithLabelValues(result).Inc()
	m.trimmed.Add(float64(bytes))
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// Handler serves /metrics from g.
func Handler(g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}

// Serve serves Handler(g) on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, g prometheus.Gatherer) error {
	srv := &http.Server{Handler: Handler(g), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
