package redis

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"

	goredis "github.com/redis/go-redis/v9"
)

// Open connects to the store named by rawURL, checks that it answers, and
// returns a backend that owns the client (Close closes it).
//
//	redis://[user:password@]host:port[/db]       one server (Redis, Valkey)
//	rediss://...                                  the same over TLS
//	unix:///path/to/redis.sock[?db=N]             one server on a Unix socket
//	redis://host:port?addr=host2:port2&addr=...   a Cluster, seeded with these nodes
//	redis://host:port?cluster=true                a Cluster, seeded with one node
//	redis://sentinel:port?master_name=NAME[&addr=sentinel2:port]  Sentinel
//
// A plain redis:// or rediss:// URL that turns out to name a Cluster node
// (INFO cluster says cluster_enabled:1) is opened as a Cluster, so pointing at
// any node of a Cluster works. Other query parameters are go-redis options
// (read_timeout=2s, pool_size=20, ...; see goredis.ParseURL); an unknown one is
// an error. The client always honours context deadlines
// (ContextTimeoutEnabled), so WithTimeout also ends the network calls.
//
// ctx bounds the connection check. Errors name the URL with its password
// redacted.
func Open(ctx context.Context, rawURL string, mem Memory, opts ...Option) (*Backend, error) {
	if ctx == nil {
		return nil, errors.New("redis: Open: ctx is nil")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the message would repeat the URL, password included
		}
		return nil, fmt.Errorf("redis: Open: not a URL: %w; want redis://host:port[/db]", err)
	}
	shown := u.Redacted()
	switch u.Scheme {
	case "redis", "rediss", "unix":
	default:
		return nil, fmt.Errorf("redis: Open %s: scheme %q; want redis://, rediss:// or unix://", shown, u.Scheme)
	}
	q := u.Query()
	cluster := false
	if v := q.Get("cluster"); v != "" {
		if cluster, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("redis: Open %s: cluster=%q; want true or false", shown, v)
		}
	}
	q.Del("cluster")
	u.RawQuery = q.Encode()
	sentinel := q.Has("master_name")
	if u.Scheme == "unix" && (cluster || sentinel || q.Has("addr")) {
		return nil, fmt.Errorf("redis: Open %s: a unix:// URL names one server; Cluster and Sentinel need redis:// or rediss://", shown)
	}

	var client goredis.UniversalClient
	switch {
	case sentinel:
		client, err = failoverClient(u)
	case cluster || q.Has("addr"):
		client, err = clusterClient(u)
	default:
		client, err = singleClient(u)
	}
	if err != nil {
		return nil, fmt.Errorf("redis: Open %s: %w", shown, err)
	}
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("redis: Open %s: the store does not answer PING: %w", shown, err)
	}
	if _, isCluster := client.(*goredis.ClusterClient); !isCluster && !sentinel && u.Scheme != "unix" {
		info, err := client.Info(ctx, "cluster").Result()
		if err == nil && strings.Contains(info, "cluster_enabled:1") {
			_ = client.Close()
			if client, err = clusterClient(u); err != nil {
				return nil, fmt.Errorf("redis: Open %s: the server is a Cluster node: %w", shown, err)
			}
			if err := client.Ping(ctx).Err(); err != nil {
				_ = client.Close()
				return nil, fmt.Errorf("redis: Open %s: the Cluster does not answer PING: %w", shown, err)
			}
		}
	}
	b, err := New(client, mem, opts...)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	b.owned = true
	return b, nil
}

func singleClient(u *url.URL) (goredis.UniversalClient, error) {
	o, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	return goredis.NewClient(o), nil
}

func clusterClient(u *url.URL) (goredis.UniversalClient, error) {
	if db := strings.Trim(u.Path, "/"); db != "" && db != "0" {
		return nil, fmt.Errorf("database %q: a Cluster has database 0 only", db)
	}
	c := *u
	c.Path = ""
	o, err := goredis.ParseClusterURL(c.String())
	if err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	return goredis.NewClusterClient(o), nil
}

func failoverClient(u *url.URL) (goredis.UniversalClient, error) {
	o, err := goredis.ParseFailoverURL(u.String())
	if err != nil {
		return nil, err
	}
	o.ContextTimeoutEnabled = true
	return goredis.NewFailoverClient(o), nil
}
