package hint

import (
	"bytes"
	"encoding/json"
	"strings"
	"time"
)

// fromBody reads the body: JSON fields, then JSON string values as prose,
// or the whole prefix as prose when it is not JSON. Instants in prose are
// measured against ref.
func fromBody(body []byte, ref time.Time) (time.Duration, bool) {
	if len(body) > MaxBody {
		body = body[:MaxBody]
	}
	doc := bytes.TrimSpace(body)
	if len(doc) == 0 {
		return 0, false
	}
	if json.Valid(doc) {
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err == nil {
			w := walker{ref: ref}
			w.walk(v, 0)
			if w.field > 0 {
				return w.field, true
			}
			return w.prose, w.prose > 0
		}
	}
	return textAt(string(body), ref, true)
}

// walker collects the longest field hint and the longest prose hint of a
// decoded JSON document.
type walker struct {
	ref          time.Time
	field, prose time.Duration
}

func (w *walker) walk(v any, depth int) {
	if depth > jsonDepth {
		return
	}
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if d, ok := field(k, x); ok {
				w.field = max(w.field, d)
			}
			w.walk(x, depth+1)
		}
	case []any:
		for _, x := range v {
			w.walk(x, depth+1)
		}
	case string:
		if d, ok := textAt(v, w.ref, true); ok {
			w.prose = max(w.prose, d)
		}
	}
}

// keyFold drops the separators of a JSON key: retry_after, retry-after
// and retryAfter all name the same field.
var keyFold = strings.NewReplacer("_", "", "-", "")

// field reads a JSON member that names a retry hint.
func field(key string, v any) (time.Duration, bool) {
	switch strings.ToLower(keyFold.Replace(key)) {
	case "retryafter", "retryafterseconds", "retryaftersecs", "retryaftersec":
		switch v := v.(type) {
		case json.Number:
			return delta(v.String(), time.Second, true)
		case string:
			s := strings.TrimSpace(v)
			if d, ok := delta(s, time.Second, false); ok {
				return d, true
			}
			return protoDuration(s)
		}
	case "retryafterms", "retryaftermillis", "retryaftermilliseconds":
		switch v := v.(type) {
		case json.Number:
			return delta(v.String(), time.Millisecond, true)
		case string:
			return delta(strings.TrimSpace(v), time.Millisecond, false)
		}
	case "retrydelay":
		if s, ok := v.(string); ok {
			return protoDuration(strings.TrimSpace(s))
		}
	}
	return 0, false
}

// protoDuration reads a protobuf JSON Duration ("10s", "1.5s", "0.250s").
func protoDuration(s string) (time.Duration, bool) {
	m := protoRE.FindStringSubmatch(s)
	if m == nil {
		return 0, false
	}
	return delta(m[1], time.Second, false)
}
