// Package dissect writes NDMA datagrams as a classic pcap capture, the
// format Wireshark and tshark read, and holds the test that runs the
// NDMA dissector (tools/wireshark/ndma.lua) over a capture of real
// traffic from a simulated fabric and checks what it decodes.
package dissect
