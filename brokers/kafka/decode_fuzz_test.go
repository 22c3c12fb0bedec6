package kafka

import (
	"bytes"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// FuzzOffsetFetchDecode: any bytes a broker sends decode without a panic,
// into no more elements than the body has bytes, and whatever kmsg decodes
// this decoder decodes alike.
func FuzzOffsetFetchDecode(f *testing.F) {
	for v := int16(8); v <= 10; v++ {
		f.Add(v, offsetFetchBody(f, v))
	}
	f.Fuzz(func(t *testing.T, version int16, body []byte) {
		version = inVersions(version, 8, 10)
		r := &offsetFetchResp{into: new(offsetsAnswer)}
		r.Version = version
		err := r.ReadFrom(body)
		n := 0
		for _, g := range r.into.groups {
			n++
			for _, tp := range g.topics {
				n += 1 + len(tp.parts)
			}
		}
		if n > len(body) {
			t.Fatalf("%d elements from %d bytes", n, len(body))
		}
		k := kmsg.NewOffsetFetchResponse()
		k.Version = version
		if !alsoKmsg(t, &k, body, err) {
			return
		}
		var a offsetsAnswer
		a.fromKmsg(&k)
		if len(a.groups) != len(r.into.groups) {
			t.Fatalf("%d groups, kmsg %d", len(r.into.groups), len(a.groups))
		}
		for i, g := range r.into.groups {
			w := a.groups[i]
			if g.name != w.name || g.code != w.code || len(g.topics) != len(w.topics) {
				t.Fatalf("group %d %+v, kmsg %+v", i, g, w)
			}
			for j, tp := range g.topics {
				wt := w.topics[j]
				if tp.name != wt.name || tp.id != wt.id || len(tp.parts) != len(wt.parts) {
					t.Fatalf("topic %d/%d %+v, kmsg %+v", i, j, tp, wt)
				}
				for p := range tp.parts {
					if tp.parts[p] != wt.parts[p] {
						t.Fatalf("partition %d/%d/%d %+v, kmsg %+v", i, j, p, tp.parts[p], wt.parts[p])
					}
				}
			}
		}
	})
}

// FuzzListOffsetsDecode: as FuzzOffsetFetchDecode, for ListOffsets v0-v9.
func FuzzListOffsetsDecode(f *testing.F) {
	for _, v := range []int16{1, 5, 6, 9} {
		resp := kmsg.NewListOffsetsResponse()
		resp.Version = v
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = "a"
		rp := kmsg.NewListOffsetsResponseTopicPartition()
		rp.Partition, rp.Offset = 1, 40
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
		f.Add(v, resp.AppendTo(nil))
	}
	f.Fuzz(func(t *testing.T, version int16, body []byte) {
		version = inVersions(version, 1, 9)
		r := &listOffsetsResp{into: new(offsetsListed)}
		r.Version = version
		err := r.ReadFrom(body)
		n := 0
		for _, tp := range r.into.topics {
			n += 1 + len(tp.parts)
		}
		if err == nil && n > len(body) {
			t.Fatalf("%d elements from %d bytes", n, len(body))
		}
		k := kmsg.NewListOffsetsResponse()
		k.Version = version
		if !alsoKmsg(t, &k, body, err) {
			return
		}
		if len(k.Topics) != len(r.into.topics) {
			t.Fatalf("%d topics, kmsg %d", len(r.into.topics), len(k.Topics))
		}
		for i, tp := range r.into.topics {
			kt := k.Topics[i]
			if tp.name != kt.Topic || len(tp.parts) != len(kt.Partitions) {
				t.Fatalf("topic %d %+v, kmsg %+v", i, tp, kt)
			}
			for j, p := range tp.parts {
				kp := kt.Partitions[j]
				if p != (listedPart{kp.Partition, kp.ErrorCode, kp.Offset}) {
					t.Fatalf("partition %d/%d %+v, kmsg %+v", i, j, p, kp)
				}
			}
		}
	})
}

// inVersions maps a fuzzed version into [lo, hi].
func inVersions(v, lo, hi int16) int16 {
	if v < lo || v > hi {
		v = lo + (v&0x7fff)%(hi-lo+1)
	}
	return v
}

// alsoKmsg decodes body with kmsg into k and reports whether the answers
// are to be compared: only when kmsg decoded body and encodes it back byte
// for byte, since kmsg is lenient where this decoder is strict (a null
// string read as empty, an array length past int32 read as null). Then
// this decoder must have succeeded too (err is its error).
func alsoKmsg(t *testing.T, k kmsg.Response, body []byte, err error) bool {
	t.Helper()
	if k.ReadFrom(body) != nil || !bytes.Equal(body, k.AppendTo(nil)) {
		return false
	}
	if err != nil {
		t.Fatalf("kmsg decodes, ours fails: %v", err)
	}
	return true
}
