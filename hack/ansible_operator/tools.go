//go:build tools

// Package tools pins the ansible-operator command for `go build` (hack/ansible_operator/go.mod).
package tools

import _ "github.com/operator-framework/ansible-operator-plugins/cmd/ansible-operator"
