package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// ErrDuration is wrapped by every error ParseDuration returns.
var ErrDuration = errors.New("invalid duration")

// maxTimeSpanDays is the days component of .NET's TimeSpan.MaxValue: .NET
// refuses more. Go's time.Duration ends far earlier, at maxDurationDays.
const (
	maxTimeSpanDays = 10675199
	day             = 24 * time.Hour
	maxDurationDays = int64(math.MaxInt64 / int64(day)) // 106751 days, about 292 years
	maxFracDigits   = 7                                 // .NET TimeSpan ticks are 100 ns
)

// ParseDuration accepts the .NET TimeSpan forms ([-][d.]hh:mm[:ss[.f]],
// [-]d:hh:mm:ss[.f], or a bare whole number of days such as "7") and Go
// durations ("168h", "4m30s"). Like .NET it refuses hours above 23, minutes
// or seconds above 59 and more than seven fraction digits. A value longer
// than a time.Duration holds (about 292 years) is refused, never wrapped.
// Errors wrap ErrDuration and quote at most about 100 characters of s.
func ParseDuration(s string) (time.Duration, error) {
	d, why := parseDuration(s)
	if why != "" {
		return 0, fmt.Errorf("%w %s: %s", ErrDuration, show(strings.TrimSpace(s)), why)
	}
	return d, nil
}

// goDurationRE is the syntax time.ParseDuration accepts; a value that
// matches it but does not parse is out of range.
var goDurationRE = regexp.MustCompile(`^[-+]?((\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// parseDuration returns the duration, or a reason ("" when valid) that
// never contains the input.
func parseDuration(s string) (time.Duration, string) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, "it is empty"
	}
	if !strings.Contains(s, ":") {
		if isDigits(strings.TrimPrefix(s, "-")) {
			// .NET reads a bare integer as a number of days.
			neg := strings.HasPrefix(s, "-")
			days, why := parseDays(strings.TrimPrefix(s, "-"))
			if why != "" {
				return 0, why
			}
			d := time.Duration(days) * day
			if neg {
				d = -d
			}
			return d, ""
		}
		d, err := time.ParseDuration(s)
		if err != nil {
			if goDurationRE.MatchString(s) {
				return 0, "it is longer than the longest duration this handler can hold (about 292 years)"
			}
			return 0, "it is neither a .NET TimeSpan ([-][d.]hh:mm[:ss[.fffffff]], or a whole number of days) nor a Go duration such as 168h or 4m30s"
		}
		return d, ""
	}
	return parseTimeSpan(s)
}

// parseTimeSpan parses the colon forms of a .NET TimeSpan.
func parseTimeSpan(s string) (time.Duration, string) {
	const form = "a .NET TimeSpan is [-][d.]hh:mm[:ss[.fffffff]] or [-]d:hh:mm:ss[.fffffff]"
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	parts := strings.Split(s, ":")
	var dayPart, hourPart, minPart, secPart string
	switch len(parts) {
	case 2, 3:
		hourPart, minPart = parts[0], parts[1]
		if len(parts) == 3 {
			secPart = parts[2]
		}
		if i := strings.IndexByte(hourPart, '.'); i >= 0 {
			dayPart, hourPart = hourPart[:i], hourPart[i+1:]
			if !isDigits(dayPart) {
				return 0, "its days are not a whole number; " + form
			}
		}
	case 4:
		dayPart, hourPart, minPart, secPart = parts[0], parts[1], parts[2], parts[3]
		if !isDigits(dayPart) {
			return 0, "its days are not a whole number; " + form
		}
	default:
		return 0, form
	}
	var fracPart string
	if i := strings.IndexByte(secPart, '.'); i >= 0 {
		secPart, fracPart = secPart[:i], secPart[i+1:]
		if !isDigits(fracPart) {
			return 0, "its fraction of a second is not digits; " + form
		}
		if len(fracPart) > maxFracDigits {
			return 0, "its fraction of a second has more than 7 digits (.NET refuses it)"
		}
	}
	if len(parts) >= 3 && !isDigits(secPart) {
		return 0, "its seconds are not a whole number; " + form
	}
	if !isDigits(hourPart) || !isDigits(minPart) {
		return 0, "its hours or minutes are not whole numbers; " + form
	}
	h, m, sec := atoiSmall(hourPart), atoiSmall(minPart), atoiSmall(secPart)
	switch {
	case h < 0 || h > 23:
		return 0, "its hours are above 23 (write days as d.hh:mm:ss, e.g. 1.00:00:00 for 24 hours)"
	case m < 0 || m > 59:
		return 0, "its minutes are above 59"
	case sec < 0 || sec > 59:
		return 0, "its seconds are above 59"
	}
	var days int64
	if dayPart != "" {
		var why string
		if days, why = parseDays(dayPart); why != "" {
			return 0, why
		}
	}
	var frac time.Duration
	if fracPart != "" {
		n, _ := strconv.Atoi(fracPart) // at most 7 digits
		for i := len(fracPart); i < 9; i++ {
			n *= 10
		}
		frac = time.Duration(n)
	}
	rest := time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second + frac
	if days > (math.MaxInt64-int64(rest))/int64(day) {
		return 0, "it is longer than the longest duration this handler can hold (about 292 years)"
	}
	d := time.Duration(days)*day + rest
	if neg {
		d = -d
	}
	return d, ""
}

// parseDays parses a whole number of days (digits only) within both .NET's
// and Go's limits.
func parseDays(s string) (int64, string) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || n > maxTimeSpanDays:
		return 0, fmt.Sprintf("its days exceed %d, the most a .NET TimeSpan holds", maxTimeSpanDays)
	case n > maxDurationDays:
		return 0, fmt.Sprintf("its %d days are longer than the longest duration this handler can hold (%d days, about 292 years)", n, maxDurationDays)
	}
	return n, ""
}

// atoiSmall parses a digit string known to be non-empty ASCII digits; a
// value too large for the field's range comes back as -1.
func atoiSmall(s string) int {
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > 1_000_000 {
		return -1
	}
	return n
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// formatTimeSpan writes d the way .NET writes a TimeSpan ("c" format):
// [-][d.]hh:mm:ss[.fffffff]. Sub-100 ns digits are dropped.
func formatTimeSpan(d time.Duration) string {
	var b strings.Builder
	u := uint64(d)
	if d < 0 {
		b.WriteByte('-')
		u = uint64(-(d + 1)) + 1 // safe for math.MinInt64
	}
	days := u / uint64(day)
	u -= days * uint64(day)
	if days > 0 {
		b.WriteString(strconv.FormatUint(days, 10))
		b.WriteByte('.')
	}
	h := u / uint64(time.Hour)
	u -= h * uint64(time.Hour)
	m := u / uint64(time.Minute)
	u -= m * uint64(time.Minute)
	s := u / uint64(time.Second)
	u -= s * uint64(time.Second)
	fmt.Fprintf(&b, "%02d:%02d:%02d", h, m, s)
	if ticks := u / 100; ticks > 0 {
		fmt.Fprintf(&b, ".%07d", ticks)
	}
	return b.String()
}
