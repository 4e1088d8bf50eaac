package hint

import "strings"

// decimal is a non-negative decimal number: digits × 10^exp, where digits
// has no leading or trailing zeros ("" is zero).
type decimal struct {
	digits string
	exp    int
}

// parseDecimal parses 1*DIGIT ["." 1*DIGIT], and with allowExp a JSON
// exponent ("e" ["+"/"-"] 1*DIGIT). Signs, NaN, Inf, hexadecimal, "5." and
// ".5" are rejected, and so is anything longer than maxNumber bytes.
func parseDecimal(s string, allowExp bool) (decimal, bool) {
	if len(s) == 0 || len(s) > maxNumber {
		return decimal{}, false
	}
	whole, rest := leadingDigits(s)
	if whole == "" {
		return decimal{}, false
	}
	frac := ""
	if strings.HasPrefix(rest, ".") {
		if frac, rest = leadingDigits(rest[1:]); frac == "" {
			return decimal{}, false
		}
	}
	exp := 0
	if allowExp && rest != "" && (rest[0] == 'e' || rest[0] == 'E') {
		var ok bool
		if exp, rest, ok = parseExponent(rest[1:]); !ok {
			return decimal{}, false
		}
	}
	if rest != "" {
		return decimal{}, false
	}
	return normalize(whole, frac, exp), true
}

// leadingDigits splits s after its leading ASCII digits.
func leadingDigits(s string) (digits, rest string) {
	i := 0
	for i < len(s) && '0' <= s[i] && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}

// parseExponent reads ["+"/"-"] 1*DIGIT at the start of s. The magnitude
// saturates at 10^6: scale only needs to know that it is huge.
func parseExponent(s string) (exp int, rest string, ok bool) {
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	digits, rest := leadingDigits(s)
	if digits == "" {
		return 0, s, false
	}
	for _, c := range digits {
		if exp < 1e6 {
			exp = exp*10 + int(c-'0')
		}
	}
	if neg {
		exp = -exp
	}
	return exp, rest, true
}

// normalize returns whole.frac × 10^exp without leading or trailing zeros.
func normalize(whole, frac string, exp int) decimal {
	digits := strings.TrimLeft(whole+frac, "0")
	exp -= len(frac)
	trimmed := strings.TrimRight(digits, "0")
	exp += len(digits) - len(trimmed)
	if trimmed == "" {
		return decimal{}
	}
	return decimal{digits: trimmed, exp: exp}
}

// scale returns ⌈d × unit⌉ when it is at most limit (unit >= 1, limit >= 1).
// The arithmetic is exact on int64: the whole part is multiplied with an
// overflow check against limit, the fraction digit by digit (fracTimes), so
// that no digit of the input is lost however long it is.
func (d decimal) scale(unit, limit int64) (int64, bool) {
	if d.digits == "" {
		return 0, true
	}
	switch mag := len(d.digits) + d.exp; { // d < 10^mag and d >= 10^(mag-1)
	case mag > 20: // d >= 10^20 > any limit / unit
		return 0, false
	case mag < -40: // 0 < d × unit < 10^-40 × 2^63 < 1
		return 1, true
	}
	whole, frac := d.split()
	w, ok := wholeTimes(whole, unit, limit)
	if !ok {
		return 0, false
	}
	f := fracTimes(frac, unit)
	if f > limit-w {
		return 0, false
	}
	return w + f, true
}

// split returns the digits of d before and after the decimal point
// (-40 <= len(digits)+exp <= 20, as scale checks).
func (d decimal) split() (whole, frac string) {
	switch mag := len(d.digits) + d.exp; {
	case mag <= 0:
		return "", strings.Repeat("0", -mag) + d.digits
	case d.exp >= 0:
		return d.digits + strings.Repeat("0", d.exp), ""
	default:
		return d.digits[:mag], d.digits[mag:]
	}
}

// wholeTimes returns whole × unit when it is at most limit.
func wholeTimes(whole string, unit, limit int64) (int64, bool) {
	maxN := limit / unit
	var n int64
	for i := 0; i < len(whole); i++ {
		dig := int64(whole[i] - '0')
		if n > maxN/10 || n*10 > maxN-dig {
			return 0, false
		}
		n = n*10 + dig
	}
	return n * unit, true
}

// fracTimes returns ⌈0.frac × unit⌉, in [0, unit]. It runs Horner's rule
// from the last digit: acc is ⌊0.d_i…d_n × unit⌋ (< unit, so 10 × unit must
// fit in an int64) and inexact records whether a remainder was dropped on
// the way; ⌊(a + x) / 10⌋ = ⌊(a + ⌊x⌋) / 10⌋ for an integer a keeps every
// step exact.
func fracTimes(frac string, unit int64) int64 {
	var acc int64
	inexact := false
	for i := len(frac) - 1; i >= 0; i-- {
		v := int64(frac[i]-'0')*unit + acc
		acc = v / 10
		inexact = inexact || v%10 != 0
	}
	if inexact {
		acc++
	}
	return acc
}

// greaterThan reports whether d > n (n ≥ 0).
func (d decimal) greaterThan(n int64) bool {
	v, ok := d.scale(1, n+1)
	return !ok || v > n
}
