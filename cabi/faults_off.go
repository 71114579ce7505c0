//go:build !kvready_testkit

package main

/*
#include "cgo.h"
*/
import "C"

import "net/url"

// openFault refuses the fault backends in the production library: "instant:"
// (which serves names it never wrote) and "mem:?mode=M" (injected failures
// and broken behaviours) exist only in the test library, so that nothing a
// production process opens by URL can fake a delivery.
func openFault(raw string, u *url.URL, _ *memory) (*backend, bool, error) {
	if u.Scheme == "instant" || (raw == "mem" || u.Scheme == "mem") && u.Query().Has("mode") {
		return nil, true, statusf(C.KVREADY_ERR_UNSUPPORTED,
			"kvready_backend_open %s: fault backends (instant:, mem:?mode=M) exist only in the test library, libkvready_testkit.so (make lib-testkit; Python: KVREADY_LIBRARY=testkit); this is libkvready.so: want mem, mem:?capacity=N, mem:?capacity_bytes=N or redis://host:port", raw)
	}
	return nil, false, nil
}
