package main

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"
)

// This file is -out: the report of -bench, -matrix or -timeline written as
// Markdown, the measurements file where the figures live, with the
// command that produced them and the date at its top.

// writeMeasurements writes the report as Markdown: the title, the command
// line of args (as go run ./example …), the date (UTC), the runs, then what
// -bench prints: its preamble, a paragraph a line, its table and, with
// -matrix, the goals' summary.
func writeMeasurements(w io.Writer, args []string, date time.Time, o options, run []mode, results []benchResult) error {
	var b bytes.Buffer
	fmt.Fprint(&b, "# Measurements\n\n")
	fmt.Fprintf(&b, "- command: %s\n", inlineCode(commandLine(args)))
	fmt.Fprintf(&b, "- date: %s (UTC)\n", date.UTC().Format(time.DateOnly))
	fmt.Fprintf(&b, "- runs: %d of each cell and mode\n", o.runs)
	for _, line := range benchPreamble(o) {
		fmt.Fprintf(&b, "\n%s\n", line)
	}
	fmt.Fprintln(&b)
	benchTable(&b, run, results)
	benchGoals(&b, o, run, results)
	_, err := w.Write(b.Bytes())
	return err
}

// writeMeasurementsFile writes the report to o.out (writeMeasurements),
// dated now.
func writeMeasurementsFile(o options, run []mode, results []benchResult, now time.Time, stderr io.Writer) error {
	var b bytes.Buffer
	if err := writeMeasurements(&b, o.args, now, o, run, results); err != nil {
		return err
	}
	if err := os.WriteFile(o.out, b.Bytes(), 0o644); err != nil {
		return fmt.Errorf("-out: %w", err)
	}
	fmt.Fprintf(stderr, "measurements written to %s\n", o.out)
	return nil
}

// commandLine is the command that ran with args, as a shell reads it:
// go run ./example and the arguments, quoted where needed, with the
// password of any URL in them (-redis) redacted.
func commandLine(args []string) string {
	words := []string{"go", "run", "./example"}
	for _, a := range args {
		words = append(words, shellQuote(redactArg(a)))
	}
	return strings.Join(words, " ")
}

// redactArg is a, or -name=value, with the password of a URL redacted.
func redactArg(a string) string {
	if name, value, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "-") {
		return name + "=" + redactURL(value)
	}
	return redactURL(a)
}

// redactURL is s with its password replaced by xxxxx when s is a URL with
// one.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); !ok {
		return s
	}
	return u.Redacted()
}

// shellQuote is s as one shell word: itself when it has nothing a shell
// reads specially, else in single quotes.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./,:=+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// inlineCode is s as Markdown inline code, fenced with more backticks than
// it contains in a row.
func inlineCode(s string) string {
	fence := "`"
	for strings.Contains(s, fence) {
		fence += "`"
	}
	if len(fence) > 1 {
		return fence + " " + s + " " + fence
	}
	return fence + s + fence
}
