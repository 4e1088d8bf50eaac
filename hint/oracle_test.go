package hint

// The math/big implementation that scale replaced, kept as the oracle of
// the property tests below until the integer one is proven equal.

import (
	"math"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// decimal is a non-negative decimal number: digits × 10^exp, where digits
// has no leading or trailing zeros ("" is zero).
type bigDecimal struct {
	digits string
	exp    int
}

// parseDecimal parses 1*DIGIT ["." 1*DIGIT], and with allowExp a JSON
// exponent ("e" ["+"/"-"] 1*DIGIT). Signs, NaN, Inf, hexadecimal, "5." and
// ".5" are rejected, and so is anything longer than maxNumber bytes.
func bigParseDecimal(s string, allowExp bool) (bigDecimal, bool) {
	if len(s) == 0 || len(s) > maxNumber {
		return bigDecimal{}, false
	}
	digitsAt := func(i int) int {
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		return i
	}
	i := digitsAt(0)
	if i == 0 {
		return bigDecimal{}, false
	}
	whole, frac := s[:i], ""
	if i < len(s) && s[i] == '.' {
		j := digitsAt(i + 1)
		if j == i+1 {
			return bigDecimal{}, false
		}
		frac, i = s[i+1:j], j
	}
	exp := 0
	if allowExp && i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		neg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			neg, i = s[i] == '-', i+1
		}
		j := digitsAt(i)
		if j == i {
			return bigDecimal{}, false
		}
		for _, c := range s[i:j] {
			if exp < 1e6 { // saturate: the magnitude checks in scale only need "huge"
				exp = exp*10 + int(c-'0')
			}
		}
		if neg {
			exp = -exp
		}
		i = j
	}
	if i != len(s) {
		return bigDecimal{}, false
	}
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	if trimmed == "" {
		return bigDecimal{}, true
	}
	return bigDecimal{digits: trimmed, exp: exp}, true
}

// scale returns ⌈d × unit⌉ when it is at most limit (unit >= 1, limit >= 1).
// The arithmetic is exact; the magnitude checks keep it small.
func (d bigDecimal) scale(unit, limit int64) (int64, bool) {
	if d.digits == "" {
		return 0, true
	}
	switch mag := len(d.digits) + d.exp; { // d < 10^mag and d >= 10^(mag-1)
	case mag > 20: // d >= 10^20 > any limit / unit
		return 0, false
	case mag < -40: // 0 < d × unit < 10^-40 × 2^63 < 1
		return 1, true
	}
	ten := big.NewInt(10)
	num, _ := new(big.Int).SetString(d.digits, 10)
	num.Mul(num, big.NewInt(unit))
	den := big.NewInt(1)
	if d.exp > 0 {
		num.Mul(num, new(big.Int).Exp(ten, big.NewInt(int64(d.exp)), nil))
	} else if d.exp < 0 {
		den.Exp(ten, big.NewInt(int64(-d.exp)), nil)
	}
	q, r := new(big.Int).QuoRem(num, den, new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > limit {
		return 0, false
	}
	return q.Int64(), true
}

var oracleUnits = []int64{int64(time.Millisecond), int64(time.Second), int64(time.Minute), int64(time.Hour), int64(24 * time.Hour), 1}
var oracleLimits = []int64{int64(maxHint), math.MaxInt64, 1}

// sameAsOracle checks that parseDecimal and scale agree with the math/big
// implementation on s, for every unit and limit the package uses.
func sameAsOracle(t *testing.T, s string) {
	t.Helper()
	for _, allowExp := range []bool{false, true} {
		d, ok := parseDecimal(s, allowExp)
		o, ook := bigParseDecimal(s, allowExp)
		if ok != ook || d.digits != o.digits || d.exp != o.exp {
			t.Fatalf("parseDecimal(%q, %v) = %+v, %v; oracle %+v, %v", s, allowExp, d, ok, o, ook)
		}
		if !ok {
			continue
		}
		for _, unit := range oracleUnits {
			for _, limit := range oracleLimits {
				got, gok := d.scale(unit, limit)
				want, wok := o.scale(unit, limit)
				if got != want || gok != wok {
					t.Fatalf("%q.scale(%d, %d) = %d, %v; oracle %d, %v", s, unit, limit, got, gok, want, wok)
				}
			}
		}
	}
}

// randomDecimal writes a decimal near the edges that matter: digits around
// the cap, the int64 range, and long fractions.
func randomDecimal(r *rand.Rand) string {
	var b strings.Builder
	b.WriteString(strings.Repeat("0", r.IntN(3)))
	for n := 1 + r.IntN(22); n > 0; n-- {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
	if r.IntN(2) == 0 {
		b.WriteByte('.')
		for n := 1 + r.IntN(40); n > 0; n-- {
			if r.IntN(3) == 0 {
				b.WriteByte('0')
			} else {
				b.WriteByte(byte('0' + r.IntN(10)))
			}
		}
	}
	if r.IntN(3) == 0 {
		b.WriteString([]string{"e", "E", "e+", "e-"}[r.IntN(4)])
		b.WriteString(strconvItoa(r.IntN(60)))
	}
	return b.String()
}

func strconvItoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return strconvItoa(n/10) + string(rune('0'+n%10))
}

func TestDecimalMatchesOracle(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		sameAsOracle(t, randomDecimal(r))
	}
	for _, s := range []string{"315360000", "315360001", "9223372036", "9223372036.854775807", "9223372036.854775808",
		"9223372036854.775807", "9223372036854775807", "9223372036854775808", "99999999999999999999", "0.000000001",
		"0.0000000001", "0.0000000005", "1e-400", "1e400", "1e-40", "1e-41", "1e-9", "1e-10", "5e2", "0", "0.000", "007"} {
		sameAsOracle(t, s)
	}
}

func FuzzDecimalMatchesOracle(f *testing.F) {
	for _, s := range []string{"1", "1.5", "0.000000001", "9223372036.854775808", "1e-7", "6.457e1", "315360000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { sameAsOracle(t, s) })
}
