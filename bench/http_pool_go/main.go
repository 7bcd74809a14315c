// Go's side of bench/http_pool.py: N goroutines POST a 100-byte body as nsq_to_http
// does (its http.Client: http_api.NewDeadlineTransport's settings), M requests in all.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "", "POST address")
	senders := flag.Int("n", 100, "concurrent senders")
	total := flag.Int64("requests", 100000, "requests in all")
	flag.Parse()
	transport := &http.Transport{
		DialContext:           (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ResponseHeaderTimeout: 20 * time.Second,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
	}
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second}
	body := bytes.Repeat([]byte("x"), 100)
	var left atomic.Int64
	left.Store(*total)
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < *senders; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				req, _ := http.NewRequest("POST", *url, bytes.NewBuffer(body))
				req.Header.Set("User-Agent", "nsq_to_http v1.3.0")
				req.Header.Set("Content-Type", "application/octet-stream")
				resp, err := client.Do(req)
				if err != nil {
					panic(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("%.0f\n", float64(*total)/time.Since(start).Seconds())
}
