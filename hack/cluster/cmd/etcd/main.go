// Command etcd runs one embedded etcd member on loopback for the test control plane
// (hack/cluster): the etcd server library of the version k8s.io/kubernetes pins, without
// the etcd binary's own module (which cannot be `go install`ed: it has replace directives).
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func mustURL(raw string) url.URL {
	u, err := url.Parse(raw)
	if err != nil {
		log.Fatalf("etcd: bad URL %q: %v", raw, err)
	}
	return *u
}

func main() {
	dataDir := flag.String("data-dir", "", "directory for etcd's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL (loopback)")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL (loopback)")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("etcd: --data-dir is required")
	}

	cfg := embed.NewConfig()
	cfg.Name = "default"
	cfg.Dir = *dataDir
	cfg.LogLevel = "warn"
	// A test store on a temporary directory: no fsync (as kind and envtest run etcd).
	cfg.UnsafeNoFsync = true
	client, peer := mustURL(*clientURL), mustURL(*peerURL)
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("etcd: start: %v", err)
	}
	defer e.Close()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)

	select {
	case <-e.Server.ReadyNotify():
		log.Printf("etcd: ready on %s", client.String())
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		log.Fatal("etcd: not ready after 60s")
	case sig := <-signals:
		log.Printf("etcd: %v before ready, stopping", sig)
		return
	}

	select {
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	case sig := <-signals:
		log.Printf("etcd: %v, stopping", sig)
	}
}
