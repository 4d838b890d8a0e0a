package main

import (
	"fmt"
	"net"
)

// sdNotify sends state ("READY=1", "STOPPING=1") to the service manager's
// socket, $NOTIFY_SOCKET (as systemd sets it for a Type=notify service;
// a name starting with @ is an abstract socket). Without one it does
// nothing.
func sdNotify(getenv func(string) string, state string) error {
	name := getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("$NOTIFY_SOCKET: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("$NOTIFY_SOCKET: %w", err)
	}
	return nil
}
