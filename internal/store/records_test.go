package store

import (
	"context"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/quotagate/quotagate/internal/model"
	"github.com/quotagate/quotagate/internal/schema"
)

// TestRecordVersion checks the format version of a scope's record hashes
// (schema.RecordVersion) on both backends: a save writes it; a record
// without it (a gate's from before records carried one) reads as it did;
// a record of a newer version is another release's, which the store
// neither reads nor writes, and which holds the scope closed until it
// expires, while a pause stays shared whatever the records' versions.
func TestRecordVersion(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := b.Open(t)
			ctx := context.Background()
			st := testStore(e.Rdb, e.Prefix)
			own := strconv.Itoa(schema.RecordVersion)

			// A refusal after three admissions teaches a learned limit.
			k := scopeKeys(e.Prefix, "ups", "taught")
			for range 3 {
				if _, err := st.Admit(ctx, k, admitRequest(1, 0)); err != nil {
					t.Fatal(err)
				}
				if e.Clock != nil {
					e.Clock.Advance(100 * time.Millisecond)
				}
			}
			if _, err := st.Pause(ctx, k, time.Second, Refusal{Hinted: true, Precision: time.Second}); err != nil {
				t.Fatal(err)
			}
			if v, err := e.Rdb.HGet(ctx, k.Learn, schema.FieldVersion).Result(); err != nil || v != own {
				t.Fatalf("learn record's %s = %q, %v; want %s", schema.FieldVersion, v, err, own)
			}
			before, err := state(ctx, st, k)
			if err != nil {
				t.Fatal(err)
			}
			if before.Learned.N == 0 {
				t.Fatalf("nothing learned: %+v", before.Learned)
			}
			if err := e.Rdb.HDel(ctx, k.Learn, schema.FieldVersion).Err(); err != nil {
				t.Fatal(err)
			}
			after, err := state(ctx, st, k)
			if err != nil {
				t.Fatal(err)
			}
			if after.Learned != before.Learned || after.Code != before.Code || after.Until != before.Until {
				t.Errorf("without its version the record reads %+v (code %d until %d), with it %+v (code %d until %d)",
					after.Learned, after.Code, after.Until, before.Learned, before.Code, before.Until)
			}

			// A newer release's record: closed until it expires, left alone.
			n := scopeKeys(e.Prefix, "ups", "newer")
			newer := map[string]string{schema.FieldVersion: strconv.Itoa(schema.RecordVersion + 1), "limit": "oops", "window": "-1"}
			if err := e.Rdb.HSet(ctx, n.Learn, newer).Err(); err != nil {
				t.Fatal(err)
			}
			if err := e.Rdb.PExpire(ctx, n.Learn, 30*time.Second).Err(); err != nil {
				t.Fatal(err)
			}
			a, err := st.Admit(ctx, n, admitRequest(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			if a.Code != model.Paused || a.Remaining() <= 29*time.Second || a.Remaining() > 30*time.Second {
				t.Errorf("admission beside a newer record: code %d, closed for %v; want paused for 30s", a.Code, a.Remaining())
			}
			if _, err := st.Pause(ctx, n, 90*time.Second, Refusal{Hinted: true, Precision: time.Second}); err != nil {
				t.Fatal(err)
			}
			if err := st.Observe(ctx, n, model.Observation{Remaining: 0, Reset: time.Minute.Microseconds(), Limit: 10}); err != nil {
				t.Fatal(err)
			}
			a, err = st.Admit(ctx, n, admitRequest(1, 0))
			if err != nil {
				t.Fatal(err)
			}
			if a.Code != model.Paused || a.Remaining() <= 89*time.Second {
				t.Errorf("after a 90s pause: code %d, closed for %v; want the pause's 90s", a.Code, a.Remaining())
			}
			got, err := e.Rdb.HGetAll(ctx, n.Learn).Result()
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, newer) {
				t.Errorf("the newer record became %v, want it left as %v", got, newer)
			}
		})
	}
}
