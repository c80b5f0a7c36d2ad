package toolserver

import "time"

// WithFetchTimings shortens the waits of the keys fetcher (KeysFrom) for a test: the
// retry after a failed fetch and its cap, the least time from a fetch to the one an
// unknown kid asks for, and the shortest max_age taken.
func WithFetchTimings(retry, maxRetry, soonest, minAge time.Duration) Option {
	return func(s *Server) {
		timings := defaultFetchTimings
		timings.retry, timings.maxRetry, timings.soonest, timings.minAge = retry, maxRetry, soonest, minAge
		s.fetchTimings = &timings
	}
}
