package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// The Functions host reads NimBus__Inbox__CleanupSchedule and
// NimBus__Outbox__SweepSchedule itself (the InboxCleanup and OutboxSweep
// timer triggers) with NCRONTAB, six fields including seconds,
// or, when that fails, as a TimeSpan interval (App Service plans). Recent
// hosts also take five fields (no seconds), older ones refuse them, so the
// same five fields could mean a schedule on one host and a start-up error on
// another: five fields are refused here. NCRONTAB has no '?', 'L', 'W', '#'
// or time-zone prefix; names are prefixes of English month and day names.
var cronParser = cron.NewParser(cron.Second | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// cronItem is one comma-separated item of an NCRONTAB field: '*', a value
// or a range, with an optional step.
var cronItem = regexp.MustCompile(`^(\*|[0-9A-Za-z]+(-[0-9A-Za-z]+)?)(/[0-9]+)?$`)

var (
	monthNames = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
	dayNames   = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	nameRun    = regexp.MustCompile(`[A-Za-z]+`)
)

// checkSchedule reports why raw is not a schedule the host accepts for the
// timer function named function ("" when it is).
func checkSchedule(raw, function string) string {
	if strings.TrimSpace(raw) == "" {
		return "it is empty, and the Functions host cannot run the " + function + " timer on an empty schedule"
	}
	raw = strings.TrimSpace(raw)
	if strings.Contains(raw, ":") {
		d, why := parseDuration(raw)
		switch {
		case why != "":
			return "it is neither an NCRONTAB expression nor a TimeSpan interval: " + why
		case d <= 0:
			return "a TimeSpan interval must be positive"
		case d < time.Second:
			return "a TimeSpan interval under one second would run the " + function + " timer without pause; use one second or more"
		}
		return ""
	}
	if strings.ContainsAny(raw, "\t\n\r\v\f") {
		return "separate its fields with spaces (the host splits on spaces only)"
	}
	fields := strings.Fields(raw)
	switch {
	case len(fields) == 5:
		return "it has 5 fields; the Functions host expects six, seconds first: {second} {minute} {hour} {day} {month} {day-of-week} (e.g. \"0 " + clip(raw, 60) + "\")"
	case len(fields) == 1:
		return "it has 1 field; NCRONTAB has six: {second} {minute} {hour} {day} {month} {day-of-week}"
	case len(fields) != 6:
		return fmt.Sprintf("it has %d fields; NCRONTAB has six: {second} {minute} {hour} {day} {month} {day-of-week}", len(fields))
	}
	for i, f := range fields {
		for _, item := range strings.Split(f, ",") {
			if !cronItem.MatchString(item) {
				return fmt.Sprintf("its %s field is not NCRONTAB (*, n, n-m, each with an optional /step, comma-separated)", fieldNames[i])
			}
		}
	}
	fields[4] = replaceNames(fields[4], monthNames, 1)
	fields[5] = replaceNames(fields[5], dayNames, 0)
	sched, err := cronParser.Parse(strings.Join(fields, " "))
	if err != nil {
		return "it is not a valid NCRONTAB expression: " + clip(err.Error(), 120)
	}
	// A date that no month has (the 30th of February, the 31st of April)
	// parses but never fires: the timer would never run. The parser looks
	// up to five years ahead, which covers every leap year.
	if sched.Next(neverFiresFrom).IsZero() {
		return "it never fires (no date matches its day and month fields), so the " + function + " timer would never run"
	}
	return ""
}

// neverFiresFrom is the instant a schedule's next firing is searched from.
var neverFiresFrom = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

var fieldNames = []string{"second", "minute", "hour", "day", "month", "day-of-week"}

// replaceNames replaces each name in field by its number the way NCRONTAB
// reads names: the first of names that the word is a case-insensitive prefix
// of. A word that matches none is left for the parser to refuse.
func replaceNames(field string, names []string, first int) string {
	return nameRun.ReplaceAllStringFunc(field, func(w string) string {
		for i, n := range names {
			if len(w) <= len(n) && strings.EqualFold(n[:len(w)], w) {
				return strconv.Itoa(first + i)
			}
		}
		return w
	})
}

// clip cuts s to at most n runes.
func clip(s string, n int) string {
	i := 0
	for j := range s {
		if i == n {
			return s[:j] + "…"
		}
		i++
	}
	return s
}
