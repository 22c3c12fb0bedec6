package nats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The listings are paged by hand rather than through jetstream's listers:
// that makes every page request visible (counted in Stats), bounded by
// MaxListPages, stoppable without a lister goroutine, and robust to a page
// that comes back empty before the announced total (the lister would ask
// for the same offset again).

// pagedRequest is the JetStream API paging request. The server fixes the
// page size (256 for info lists); the request carries only an offset.
type pagedRequest struct {
	Offset int `json:"offset"`
}

type apiPaged struct {
	Total  int `json:"total"`
	Offset int `json:"offset"`
	Limit  int `json:"limit"`
}

type streamListResponse struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	apiPaged
	Streams []*jetstream.StreamInfo `json:"streams"`
	Missing []string                `json:"missing,omitempty"`
	Offline map[string]string       `json:"offline,omitempty"`
}

type consumerListResponse struct {
	Error *jetstream.APIError `json:"error,omitempty"`
	apiPaged
	Consumers []*jetstream.ConsumerInfo `json:"consumers"`
	Missing   []string                  `json:"missing,omitempty"`
	Offline   map[string]string         `json:"offline,omitempty"`
}

// apiRequest sends one JetStream API request with RequestTimeout and
// decodes the JSON reply into resp.
func (o *Observer) apiRequest(ctx context.Context, subject string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.cfg.RequestTimeout)
	defer cancel()
	msg, err := o.nc.RequestWithContext(ctx, o.prefix+subject, data)
	if err != nil {
		return requestError(err)
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("decode %s reply: %w", subject, err)
	}
	return nil
}

// requestError maps "no responders" on the JetStream API to
// ErrNoJetStream, keeping the original error in the chain.
func requestError(err error) error {
	if errors.Is(err, natsgo.ErrNoResponders) {
		return fmt.Errorf("%w: %w", ErrNoJetStream, err)
	}
	return err
}

// listPages walks a paged listing, calling page(offset) until the total is
// reached, a page comes back empty, or MaxListPages pages were read.
func (o *Observer) listPages(what string, page func(offset int) (got, total int, err error)) error {
	offset := 0
	for pages := 0; ; pages++ {
		if pages == o.cfg.MaxListPages {
			return fmt.Errorf("%w: %s: %d pages read, %d entries", ErrTooManyPages, what, pages, offset)
		}
		got, total, err := page(offset)
		if err != nil {
			return err
		}
		offset += got
		if got == 0 || offset >= total {
			return nil
		}
	}
}

// listStreams returns every stream's info (taken at the start of the
// cycle) and the names the server could not report this time.
func (o *Observer) listStreams(ctx context.Context, cs *cycleCounters) ([]*jetstream.StreamInfo, []string, error) {
	var infos []*jetstream.StreamInfo
	var missing []string
	err := o.listPages("stream list", func(offset int) (int, int, error) {
		cs.listCalls.Add(1)
		var resp streamListResponse
		if err := o.apiRequest(ctx, "STREAM.LIST", pagedRequest{Offset: offset}, &resp); err != nil {
			return 0, 0, err
		}
		if resp.Error != nil {
			return 0, 0, resp.Error
		}
		for _, si := range resp.Streams {
			if si != nil {
				infos = append(infos, si)
			}
		}
		missing = append(missing, resp.Missing...)
		for name := range resp.Offline {
			missing = append(missing, name)
		}
		return len(resp.Streams), resp.Total, nil
	})
	return infos, missing, err
}

// listConsumers returns the infos of every consumer of stream, and the
// names whose info the server could not report (a clustered consumer
// leader that did not answer, or an offline consumer).
func (o *Observer) listConsumers(ctx context.Context, stream string, cs *cycleCounters) ([]*jetstream.ConsumerInfo, []string, error) {
	var infos []*jetstream.ConsumerInfo
	var missing []string
	err := o.listPages("consumer list of "+stream, func(offset int) (int, int, error) {
		cs.listCalls.Add(1)
		var resp consumerListResponse
		if err := o.apiRequest(ctx, "CONSUMER.LIST."+stream, pagedRequest{Offset: offset}, &resp); err != nil {
			return 0, 0, err
		}
		if resp.Error != nil {
			return 0, 0, resp.Error
		}
		for _, ci := range resp.Consumers {
			if ci != nil {
				infos = append(infos, ci)
			}
		}
		missing = append(missing, resp.Missing...)
		for name := range resp.Offline {
			missing = append(missing, name)
		}
		return len(resp.Consumers), resp.Total, nil
	})
	return infos, missing, err
}
