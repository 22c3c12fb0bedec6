package kafka

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/lagbridge/lagbridge/lag"
)

// batch encodes a v2 record batch header over body bytes of records (not
// decodable; enough for the header reader).
func batch(first int64, lastDelta int32, firstTS, maxTS int64, attrs int16, body int) []byte {
	rb := kmsg.RecordBatch{
		FirstOffset: first, Magic: 2, Attributes: attrs, LastOffsetDelta: lastDelta,
		FirstTimestamp: firstTS, MaxTimestamp: maxTS, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1,
		NumRecords: lastDelta + 1, Records: make([]byte, body),
	}
	raw := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[8:], uint32(len(raw)-12))
	return raw
}

func TestTruncatedBatchHead(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		raw             []byte
		first, last, ts int64
		ok              bool
	}{
		// A CreateTime batch cut by the byte limit: offsets from the
		// header, the first timestamp.
		{"create time", batch(100, 9, 1000, 1009, 0, 500)[:200], 100, 109, 1000, true},
		// Compressed (zstd attribute): the header is never compressed.
		{"compressed", batch(100, 9, 1000, 1009, 4, 500)[:80], 100, 109, 1000, true},
		// LogAppendTime: every record has the max timestamp.
		{"log append time", batch(5, 0, 1, 77, 0x08, 100)[:70], 5, 5, 77, true},
		// Delete horizon set: the first timestamp is not a record time.
		{"delete horizon", batch(5, 3, 1, 88, 0x40, 100)[:70], 5, 8, 88, true},
		// Transactional: records may be aborted, not used.
		{"transactional", batch(5, 0, 1, 1, 0x10, 100)[:70], 0, 0, 0, false},
		// Control: markers only, not used.
		{"control", batch(5, 0, 1, 1, 0x20, 100)[:70], 0, 0, 0, false},
		// A whole batch is decoded by kgo, not read here.
		{"whole", batch(5, 0, 1, 1, 0, 10), 0, 0, 0, false},
		// Shorter than a header.
		{"short", batch(5, 0, 1, 1, 0, 100)[:60], 0, 0, 0, false},
		// Old message format.
		{"magic 1", func() []byte { b := batch(5, 0, 1, 1, 0, 100)[:70]; b[16] = 1; return b }(), 0, 0, 0, false},
		// Nothing.
		{"empty", nil, 0, 0, 0, false},
	}
	for _, tc := range cases {
		first, last, ts, ok := truncatedBatchHead(tc.raw)
		if ok != tc.ok || (ok && (first != tc.first || last != tc.last || ts != tc.ts)) {
			t.Errorf("%s: got %d..%d ts %d ok %v, want %d..%d ts %d ok %v", tc.name, first, last, ts, ok, tc.first, tc.last, tc.ts, tc.ok)
		}
	}
}

// TestResolveTruncated: a head inside a batch the broker truncated takes
// the batch header's time; one past it stays unknown.
func TestResolveTruncated(t *testing.T) {
	t.Parallel()
	o := &Observer{heads: map[string]*topicHeads{}, cycle: 1, decompressor: kgo.DefaultDecompressor()}
	var slot []headEntry
	ti := &topicInfo{name: "t"}
	rp := &kmsg.FetchResponseTopicPartition{RecordBatches: batch(100, 9, 1000, 1009, 0, 5000)[:300]}
	pf := &partFetch{topic: ti, from: 103}
	parseHead(pf, rp, o.decompressor)
	if !pf.done || pf.err != "" || len(pf.recs) != 0 || pf.next != 103 || !pf.fbOK {
		t.Fatalf("parsed %+v", pf)
	}
	in := lag.PartitionSample{End: 200, LogStart: 0, Committed: 103}
	if !o.resolve(pendingHead{ps: &in, need: headNeed{key: headKey{"t", 0, 103}, slot: &slot, from: 103}}, pf) {
		t.Fatal("not resolved")
	}
	if in.Lag != 97 || !in.HeadKnown || !in.HeadTime.Equal(time.UnixMilli(1000)) {
		t.Fatalf("inside: %+v", in)
	}
	past := lag.PartitionSample{End: 200, Committed: 110}
	if o.resolve(pendingHead{ps: &past, need: headNeed{key: headKey{"t", 0, 110}, slot: &slot, from: 110}}, pf) || past.HeadKnown {
		t.Fatalf("past the batch: %+v", past)
	}
	if len(slot) != 1 || slot[0].offset != 103 || slot[0].pos != 103 {
		t.Fatalf("cache %+v", slot)
	}
}

// TestCompressedHeads: heads are decoded from batches of every codec.
func TestCompressedHeads(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	}
	adm := kadm.NewClient(newClient(t, c))
	for i, tc := range codecs {
		cl := newClient(t, c, kgo.ProducerBatchCompression(tc.codec))
		createTopic(t, adm, "z-"+tc.name, 1, nil)
		recs := make([]*kgo.Record, 50)
		for j := range recs {
			recs[j] = rec("z-"+tc.name, 0, i*100+j, "a fairly compressible value, repeated, repeated, repeated")
		}
		produce(t, cl, recs...)
		commit(t, adm, "zg", "z-"+tc.name, map[int32]int64{0: 17})
	}
	got := observe(t, newObserver(t, c, nil))
	for i, tc := range codecs {
		wantPart(t, mustFind(t, got, "zg", "z-"+tc.name), 0, 0, 50, 17, 33, i*100+17)
	}
}
