package monitor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/repstream/repstream/internal/stats"
)

// Sample is one answer of GET /status: the stats registry and the engine's
// positions (Status is the zero value when the endpoint reported none).
type Sample struct {
	Stats  stats.Snapshot   `json:"stats"`
	Status stats.LiveStatus `json:"status"`
}

// StatusURL turns what a user gives to --http (":9187", "host:9187",
// "http://host:9187", with or without "/status") into the URL of /status.
func StatusURL(addr string) string {
	u := strings.TrimSpace(addr)
	if !strings.Contains(u, "://") {
		if strings.HasPrefix(u, ":") {
			u = "127.0.0.1" + u
		}
		u = "http://" + u
	}
	u = strings.TrimRight(u, "/")
	if !strings.HasSuffix(u, "/status") {
		u += "/status"
	}
	return u
}

// Fetch reads one sample from url (see StatusURL).
func Fetch(ctx context.Context, client *http.Client, url string) (Sample, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Sample{}, fmt.Errorf("GET %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return Sample{}, fmt.Errorf("GET %s (is `repstream run --http` running there?): %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Sample{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	var s Sample
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		return Sample{}, fmt.Errorf("decode %s: %w", url, err)
	}
	return s, nil
}
