package model

import "time"

// Class is the class of a request's work (quotagate.Class): background
// work leaves the reserve to interactive work (see class.go).
type Class int

// The classes, as quotagate numbers them.
const (
	Background Class = iota
	Interactive
)

// String returns "background" or "interactive".
func (c Class) String() string {
	if c == Interactive {
		return "interactive"
	}
	return "background"
}

// MinPause is the shortest pause a refusal sets (quotagate.MinPause): the
// article's clamp of a hint below a second.
const MinPause = time.Second
