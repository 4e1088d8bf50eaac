package hint_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/quotagate/quotagate/hint"
)

func ExampleFromText() {
	for _, s := range []string{
		"Rate limit exceeded. Please try again in 15 seconds.",
		"retry in 10.5s",
		"try again in 1m30s",
		"try again in 500ms",
		"limit of 100 requests in 60 seconds", // a window, not a wait
		"try again later",
	} {
		d, ok := hint.FromText(s)
		fmt.Println(d, ok)
	}
	// Output:
	// 15s true
	// 11s true
	// 1m30s true
	// 500ms true
	// 0s false
	// 0s false
}

func ExampleFrom() {
	// A 429 as a provider sends it: a Retry-After header and a JSON body.
	resp := &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Header:     http.Header{"Retry-After": {"15"}},
	}
	body := []byte(`{"error":{"message":"Rate limit exceeded. Please try again in 20 seconds."}}`)

	d, ok := hint.From(resp, body)
	fmt.Println(d, ok) // Retry-After wins

	resp.Header.Del("Retry-After")
	d, ok = hint.From(resp, body)
	fmt.Println(d, ok) // the message is read as prose
	// Output:
	// 15s true
	// 20s true
}

func ExampleFromAt() {
	// An HTTP-date is measured against the response's Date header, so a
	// skewed local clock (now) does not change the hint.
	date := time.Date(2025, time.March, 4, 5, 6, 7, 0, time.UTC)
	resp := &http.Response{
		StatusCode: http.StatusTooManyRequests,
		Header: http.Header{
			"Date":        {date.Format(http.TimeFormat)},
			"Retry-After": {date.Add(30 * time.Second).Format(http.TimeFormat)},
		},
	}
	now := date.Add(10 * time.Minute)
	fmt.Println(hint.FromAt(resp, nil, now))
	// Output: 30s true
}
