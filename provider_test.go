package quotagate

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestScopeString(t *testing.T) {
	for s, want := range map[Scope]string{
		{Provider: "ups"}:                  "ups",
		{Provider: "ups", Account: "acct"}: "ups/acct",
	} {
		if got := s.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", s, got, want)
		}
	}
}

// TestScopeValidate: Validate rejects what cannot name a quota, and its
// error never quotes the account.
func TestScopeValidate(t *testing.T) {
	const secret = "sk_live_51HqLyjWDarjtT1zdp7dc"
	long := strings.Repeat("x", MaxScopeField)
	for _, tc := range []struct {
		s  Scope
		ok bool
	}{
		{Scope{Provider: "ups"}, true},
		{Scope{Provider: "ups", Account: "acct-1"}, true},
		{Scope{Provider: "ups", Account: Fingerprint(secret)}, true},
		{Scope{Provider: "ünïcödé", Account: "日本"}, true},
		{Scope{Provider: "a:b{c}%d", Account: "e:f}{g"}, true}, // escaped in keys
		{Scope{Provider: long, Account: long}, true},
		{Scope{}, false},
		{Scope{Account: "acct"}, false},
		{Scope{Provider: long + "x"}, false},
		{Scope{Provider: "ups", Account: secret + long}, false},
		{Scope{Provider: "u\xffps"}, false},
		{Scope{Provider: "ups", Account: secret + "\xff"}, false},
		{Scope{Provider: "ups\n"}, false},
		{Scope{Provider: "ups", Account: secret + "\x00"}, false},
		{Scope{Provider: "ups", Account: secret + "\t"}, false},
		{Scope{Provider: "ups", Account: "\x7f" + secret}, false},
		{Scope{Provider: "ups", Account: secret + "\u0085"}, false}, // C1 control
	} {
		err := tc.s.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", tc.s, err, tc.ok)
			continue
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, ErrInvalidScope) {
			t.Errorf("Validate(%q) = %v, want ErrInvalidScope", tc.s, err)
		}
		if tc.s.Account != "" && strings.Contains(err.Error(), tc.s.Account) || strings.Contains(err.Error(), secret) {
			t.Errorf("Validate error %q quotes the account", err)
		}
	}
}

var fingerprintFormat = regexp.MustCompile(`^fp:[0-9a-f]{24}$`)

// TestFingerprint: fixed format, stable across releases (a changed value
// would split every scope's shared state), distinct per secret, without
// the secret.
func TestFingerprint(t *testing.T) {
	for secret, want := range map[string]string{
		"sk_live_51HqLyjWDarjtT1zdp7dc": "fp:2543c60dff12709b54ee918f",
		"":                              "fp:8ebbfc8586342da266941dcd",
	} {
		if got := Fingerprint(secret); got != want {
			t.Errorf("Fingerprint(%q) = %q, want %q (stable)", secret, got, want)
		}
	}
	secrets := []string{
		"", " ", "a", "A", "sk_live_1", "sk_live_2", "sk_live_1 ", "quotagate/fingerprint/v1",
		"\x00", "\x00\x00", strings.Repeat("k", 10_000), "sk_live_51HqLyjWDarjtT1zdp7dc",
	}
	seen := map[string]string{}
	for _, s := range secrets {
		fp := Fingerprint(s)
		if !fingerprintFormat.MatchString(fp) {
			t.Errorf("Fingerprint(%q) = %q, want fp: and 24 hex digits", s, fp)
		}
		if fp != Fingerprint(s) {
			t.Errorf("Fingerprint(%q) is not deterministic", s)
		}
		if prev, dup := seen[fp]; dup {
			t.Errorf("Fingerprint(%q) == Fingerprint(%q) = %q", s, prev, fp)
		}
		seen[fp] = s
		if len(s) > 3 && strings.Contains(fp, s) {
			t.Errorf("Fingerprint(%q) = %q contains the secret", s, fp)
		}
		if err := (Scope{Provider: "ups", Account: fp}).Validate(); err != nil {
			t.Errorf("a fingerprint is not a valid account: %v", err)
		}
	}
}

// hashTag returns the part of key Redis Cluster hashes: the text between
// the first '{' and the first '}' after it, when that is not empty.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// unescapeTag reverses the scope's encoding in a hash tag.
func unescapeTag(tag string) (Scope, bool) {
	p, a, ok := strings.Cut(tag, ":")
	if !ok || strings.Contains(a, ":") {
		return Scope{}, false
	}
	un := strings.NewReplacer("%3A", ":", "%7B", "{", "%7D", "}", "%25", "%")
	return Scope{Provider: un.Replace(p), Account: un.Replace(a)}, true
}

// checkScopeKeys asserts the key layout of one scope and returns its tag.
func checkScopeKeys(t *testing.T, prefix string, s Scope) string {
	t.Helper()
	k := scopeKeys(prefix, s)
	tag := hashTag(k.Pause)
	for kind, key := range map[string]string{"pause": k.Pause, "tat": k.Tat, "line": k.Line} {
		if !strings.HasPrefix(key, prefix+":{") || !strings.HasSuffix(key, "}:"+kind) {
			t.Errorf("%v: key %q, want %s:{…}:%s", s, key, prefix, kind)
		}
		if got := hashTag(key); got != tag {
			t.Errorf("%v: %s key has hash tag %q, the pause key %q", s, kind, got, tag)
		}
	}
	if strings.ContainsAny(tag, "{}") {
		t.Errorf("%v: hash tag %q holds a brace", s, tag)
	}
	if back, ok := unescapeTag(tag); !ok || back != s {
		t.Errorf("%v: hash tag %q decodes to %v, %v", s, tag, back, ok)
	}
	return tag
}

// TestScopeKeys: every key of a scope carries one hash tag built from the
// scope, so one scope's keys share a Cluster slot; escaping keeps scopes
// apart and the tag closed where it should be.
func FuzzScopeKeys(f *testing.F) {
	f.Add("ups", "acct-1")
	f.Add("a:b", "c")
	f.Add("}{", "%7D")
	f.Fuzz(func(t *testing.T, p, a string) {
		checkScopeKeys(t, "quotagate", Scope{Provider: p, Account: a})
	})
}

// TestNewTaskScopeOf: the scope rides on the task's headers.
// TestNewTaskMaxRetry: NewTask keeps the user's MaxRetry in a header and
// enqueues one more retry, the reserve for deferrals; asynq stores it.
// TestUserMaxRetry: only a well-formed, non-negative header counts.
// TestScopeContext: WithScope and ScopeFromContext round-trip.
func TestScopeContext(t *testing.T) {
	s := Scope{Provider: "ups", Account: "acct"}
	if got, ok := ScopeFromContext(WithScope(context.Background(), s)); !ok || got != s {
		t.Errorf("ScopeFromContext(WithScope) = %v, %v", got, ok)
	}
	if _, ok := ScopeFromContext(context.Background()); ok {
		t.Error("ScopeFromContext(Background): ok")
	}
}
