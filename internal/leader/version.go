package leader

import (
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"

	"github.com/lagbridge/lagbridge/brokers"
)

// MinNATSServer is the oldest nats-server that ha on NATS runs on: 2.11
// brought per-message times to live (the election and shard buckets,
// OpenTTLBucket) and the Nats-Expected-Last-Subject-Sequence-Subject
// header (KVFence). An older server refuses the one or ignores the other,
// and a deposed leader's writes would not be fenced.
const MinNATSServer = "2.11.0"

var minNATSServer = brokers.Version{2, 11, 0}

// ErrServerTooOld is returned (wrapped, naming both versions) by
// CheckServer for a server older than MinNATSServer, or one whose version
// does not read as major.minor.patch.
var ErrServerTooOld = errors.New("nats-server too old for ha")

// CheckServer checks the version of the server nc is connected to
// (Conn.ConnectedServerVersion): an error wrapping ErrServerTooOld when it
// is older than MinNATSServer or unreadable; nil when it is recent enough,
// or when nc is not connected yet (nothing to check: call it again once
// connected). A cluster's servers each answer for themselves: the check
// sees only the one nc is connected to.
func CheckServer(nc *natsgo.Conn) error {
	if nc == nil || !nc.IsConnected() {
		return nil
	}
	v := nc.ConnectedServerVersion()
	got, ok := brokers.ParseVersion(v)
	if !ok {
		return fmt.Errorf("%w: the server at %s reports version %q, not major.minor.patch; ha on NATS needs nats-server %s or later",
			ErrServerTooOld, nc.ConnectedUrlRedacted(), v, MinNATSServer)
	}
	if !got.AtLeast(minNATSServer) {
		return fmt.Errorf("%w: the server at %s is nats-server %s; ha on NATS needs %s or later (per-key times to live and fenced writes)",
			ErrServerTooOld, nc.ConnectedUrlRedacted(), v, MinNATSServer)
	}
	return nil
}
