package unixjson

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestDo(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		var in map[string]int
		json.NewDecoder(r.Body).Decode(&in)
		in["n"]++
		json.NewEncoder(w).Encode(in)
	})
	mux.HandleFunc("GET /busy", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
		w.Write([]byte(`{"error":"a rebuild is running"}`))
	})
	mux.HandleFunc("GET /bare", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	c := New(serve(t, mux), "peer", 5*time.Second)

	var out map[string]int
	if err := c.Do("POST", "/echo", map[string]int{"n": 41}, &out); err != nil || out["n"] != 42 {
		t.Fatalf("echo: %v %v", out, err)
	}
	var se *StatusError
	if err := c.Do("GET", "/busy", nil, nil); !errors.As(err, &se) || se.Status != 409 || se.Message != "a rebuild is running" {
		t.Errorf("busy: %v", err)
	}
	if err := c.Do("GET", "/bare", nil, nil); !errors.As(err, &se) || se.Status != 500 || se.Message == "" {
		t.Errorf("bare 500: %v", err)
	}
	dead := New(filepath.Join(t.TempDir(), "none.sock"), "peer", time.Second)
	if err := dead.Do("GET", "/x", nil, nil); !errors.Is(err, ErrUnreachable) {
		t.Errorf("absent socket: %v, want ErrUnreachable", err)
	}
}
