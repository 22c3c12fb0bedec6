// Package deploy holds no Go code: it is the home of lagbridge's deployment
// files, and its tests check them.
//
//   - examples/: config files for Kafka, NATS and both, loaded by the tests
//     with the daemon's own config loader (internal/config).
//   - grafana/lagbridge.json: the Grafana dashboard; integration tests check
//     every metric name in it against a running daemon's /metrics.
//   - prometheus/alerts.yaml: alert rules, checked and unit-tested with
//     promtool (alerts_test.yaml).
//   - helm/lagbridge: the Helm chart, linted and rendered by helm/check (a
//     separate Go module on Helm's packages); manifests/ is its rendering
//     with default values, kept up to date by a test.
//   - Dockerfile and systemd/lagbridge.service.
//
// Refresh generated files with LAGBRIDGE_UPDATE=1 go test ./deploy/.
package deploy
