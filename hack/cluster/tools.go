//go:build tools

// The commands `make cluster-build` builds from k8s.io/kubernetes; importing them here keeps
// their dependencies in go.mod/go.sum (go mod tidy) without building them into anything.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
