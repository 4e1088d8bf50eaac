package quotagate

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
)

// TestUnhintedRefusalKeepsExpiry: what a scope learned always expires, also
// after an unhinted refusal following its first contact. (Before, that
// refusal left the learned hash without a TTL.) The hintless episode the
// refusal started lives for its pause (a second) and then as long.
func TestUnhintedRefusalKeepsExpiry(t *testing.T) {
	c, rdb := newMini(t)
	s := Scope{Provider: "acme", Account: "a"}
	g := New(rdb, Config{Prefix: "qgtest", Tuning: Tuning{OpenCache: -1}})
	defer g.Close()
	ctx := context.Background()
	if err := g.admit(ctx, s, 1, false); err != nil {
		t.Fatal(err)
	}
	k := scopeKeys("qgtest", s)
	if _, ok := g.record(ctx, s, k, 0, 0, grant{}); !ok {
		t.Fatal("refusal not recorded")
	}
	for _, key := range c.MR.Keys() {
		if strings.Contains(key, ":feed:") {
			continue // the feed's, not the scope's (internal/feed)
		}
		life := time.Duration(model.LearnTTL)*time.Microsecond + model.ExpiryMargin
		if key == k.Fallback {
			life += MinPause // the episode's first pause
		}
		if ttl := c.MR.TTL(key); ttl <= 0 || ttl > life {
			t.Errorf("%s: TTL %v, want within the learned state's life", key, ttl)
		}
	}
}
