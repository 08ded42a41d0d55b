package cosmos

import "testing"

// BenchmarkASCIIJSONPartitionKey rewrites the header of a delivery's
// partition key (an ASCII session or customer id, as the inbox and the
// sample write them).
func BenchmarkASCIIJSONPartitionKey(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := asciiJSONPartitionKey(`["load-fresh-3fa2b9c1d0-64-017-03"]`); err != nil {
			b.Fatal(err)
		}
	}
}
