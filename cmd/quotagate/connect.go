package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisURL returns the URL that the address v names: v itself when it has
// a scheme (redis://, rediss://, unix://), else redis://v, so that
// host:port, a bare host (port 6379) and host:port/db all work. With
// cluster, a list host:port,host:port,... names the seed nodes: the first
// is the URL's host, the others its addr parameters.
func redisURL(v string, cluster bool) (string, error) {
	if strings.Contains(v, "://") {
		return v, nil
	}
	seeds := strings.Split(v, ",")
	if len(seeds) > 1 && !cluster {
		return "", errors.New("several addresses name a Redis Cluster: add -cluster")
	}
	q := url.Values{}
	for i, s := range seeds[1:] {
		if s == "" || strings.ContainsAny(s, "/?#@") {
			return "", fmt.Errorf("seed %d of the list: want host:port", i+2)
		}
		q.Add("addr", s)
	}
	if len(q) == 0 {
		return "redis://" + v, nil
	}
	return "redis://" + seeds[0] + "?" + q.Encode(), nil
}

// silent drops go-redis's own log lines (dial retries): failures reach the
// user once, as this command's error.
type silent struct{}

func (silent) Printf(context.Context, string, ...any) {}

// connect opens the client c's address names and checks that Redis
// answers. A bad address is a usageError that names where it came from
// (-redis or the environment) and never quotes it: it may hold a password.
func connect(ctx context.Context, c config) (redis.UniversalClient, string, error) {
	from := c.redisFrom
	if from == "" {
		from = "-redis"
	}
	bad := func(err error) error {
		return usageError{from + ": " + redactURLError(err) + " (want host:port or redis://[user:password@]host:port/db)"}
	}
	u, err := redisURL(c.redisURL, c.cluster)
	if err != nil {
		return nil, "", bad(err)
	}
	var rdb redis.UniversalClient
	var where string
	if c.cluster {
		o, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, "", bad(err)
		}
		rdb, where = redis.NewClusterClient(o), "the Redis Cluster at "+strings.Join(o.Addrs, ",")
	} else {
		o, err := redis.ParseURL(u)
		if err != nil {
			return nil, "", bad(err)
		}
		rdb, where = redis.NewClient(o), "Redis at "+o.Addr
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		rdb.Close()
		return nil, "", fmt.Errorf("cannot reach %s: %v", where, err)
	}
	return rdb, where, nil
}

// redactURLError returns a URL parsing error without the URL, which may
// hold a password.
func redactURLError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return "invalid URL: " + ue.Err.Error()
	}
	return err.Error()
}
