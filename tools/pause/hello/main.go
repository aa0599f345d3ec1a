// hello shows that a real kubelet ran it, on which node, and that pods reach each other:
//
//	hello [words...]      print "hello from <node> <words>" and exit 0
//	hello serve PORT      answer every TCP connection on PORT with that line, until killed
//	hello get HOST:PORT   print what HOST:PORT answers and exit 0 (1 if it cannot connect within 10 s)
//
// The node is $NODE_NAME (a pod sets it from spec.nodeName), else the hostname.
package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	node := os.Getenv("NODE_NAME")
	if node == "" {
		node, _ = os.Hostname()
	}
	args := os.Args[1:]
	switch {
	case len(args) == 2 && args[0] == "serve":
		serve(args[1], fmt.Sprintf("hello from %s\n", node))
	case len(args) == 2 && args[0] == "get":
		os.Exit(get(args[1]))
	default:
		fmt.Printf("hello from %s %s\n", node, strings.Join(args, " "))
	}
}

func serve(port, line string) {
	listener, err := net.Listen("tcp", ":"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
	fmt.Printf("serving on :%s\n", port)
	for {
		conn, err := listener.Accept()
		if err != nil {
			continue
		}
		_, _ = io.WriteString(conn, line)
		_ = conn.Close()
	}
}

func get(address string) int {
	conn, err := net.DialTimeout("tcp", address, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		return 1
	}
	defer conn.Close()
	_, _ = io.Copy(os.Stdout, conn)
	return 0
}
