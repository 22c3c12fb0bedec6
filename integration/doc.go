// Package integration holds lagbridge's end-to-end tests: the daemon and its
// adapters against kfake and an embedded nats-server (always), and against a
// real Apache Kafka 4.x single node in KRaft mode on 127.0.0.1, which
// integration/kafka/kafka.sh fetches through Maven and starts (make test does
// both). Without that broker the real-Kafka tests skip locally and fail
// under CI.
package integration
