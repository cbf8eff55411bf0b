package dashboard_test

import (
	"log"
	"net/http"
	"os"

	"github.com/redmap/redmap/connect"

	"github.com/redmap/redmap/dashboard"
)

// Mount the dashboard in a program's own server, under /redmap/ (a path
// ending in a slash: the page's links are relative to it).
func Example() {
	client, err := connect.URL(os.Getenv("REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	d, err := dashboard.New(client, dashboard.Options{})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/redmap/", http.StripPrefix("/redmap", d))
	log.Fatal(http.ListenAndServe("127.0.0.1:8080", mux))
}
