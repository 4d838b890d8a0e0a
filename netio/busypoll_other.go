//go:build !linux

package netio

const busyPollSupported = false
