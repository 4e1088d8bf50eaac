package quotagate

import (
	"testing"
	"time"
)

func TestScopeKeys(t *testing.T) {
	k := scopeKeys("quotagate", Scope{Provider: "ups", Account: "acct-1"})
	if k.Pause != "quotagate:{ups:acct-1}:pause" || k.Tat != "quotagate:{ups:acct-1}:tat" || k.Line != "quotagate:{ups:acct-1}:line" {
		t.Errorf("keys %+v", k)
	}
	scopes := []Scope{
		{Provider: "a:b", Account: "c"}, {Provider: "a", Account: "b:c"},
		{Provider: "a%3Ab", Account: "c"}, {Provider: "a", Account: "b%3Ac"},
		{Provider: "a}", Account: "b"}, {Provider: "a", Account: "}b"}, {Provider: "a}:{b"},
		{Provider: "a{", Account: "b"}, {Provider: "a", Account: "{b}"}, {Provider: "{a}", Account: ""},
		{Provider: "a%", Account: "b"}, {Provider: "a%25", Account: "b"}, {Provider: "a%7D"},
		{Provider: "a"}, {Provider: "a:"}, {Provider: "a", Account: ":"}, {Provider: "a", Account: "%"},
		{Provider: "ups", Account: Fingerprint("secret")},
	}
	tags := map[string]Scope{}
	for _, s := range scopes {
		tag := checkScopeKeys(t, "quotagate", s)
		if prev, dup := tags[tag]; dup {
			t.Errorf("%v and %v share the hash tag %q", s, prev, tag)
		}
		tags[tag] = s
	}
	if a, b := scopeKeys("p", Scope{Provider: "a:b", Account: "c"}), scopeKeys("p", Scope{Provider: "a", Account: "b:c"}); a == b {
		t.Errorf(`("a:b","c") and ("a","b:c") share keys %+v`, a)
	}
	if a, b := scopeKeys("one", Scope{Provider: "ups"}), scopeKeys("two", Scope{Provider: "ups"}); a.Pause == b.Pause {
		t.Error("the prefix does not separate gates")
	}
}

// TestLimitKeys: a scope's i-th limit keeps its state under the key its
// kind names (the first GCRA limit's is the scope's tat key).
func TestLimitKeys(t *testing.T) {
	k := scopeKeys("qgtest", Scope{Provider: "ups"})
	if limitKey(k, 0, PerSecond(1, 1)) != k.Tat || limitKey(k, 1, FixedWindow(3, time.Second)) != k.Base+"win2" {
		t.Errorf("limit keys %q %q", limitKey(k, 0, PerSecond(1, 1)), limitKey(k, 1, FixedWindow(3, time.Second)))
	}
}
