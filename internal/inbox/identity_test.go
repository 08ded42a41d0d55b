package inbox

import (
	"strings"
	"testing"
)

// Vectors from research/nimbus-subscriber.md §7.4, computed from NimBus's
// InboxIdentity algorithm.
func TestIdentityHashVectors(t *testing.T) {
	cases := []struct{ endpoint, message, want string }{
		{"billing", `orders/one?#\customer`, "1159040A9607A8F0686169BA21981998EB32D6279CC5A0CFBE80CBF530B4F0D5"},
		{"shipping", `orders/one?#\customer`, "79E8E63EE69B5EB478E0CB6733E735458D84894A87033799C9703FE369B41160"},
		{"billing", "m-1", "52B03B3F613F2E7313454206FE3C2E51EC71F873F869B828F906B8FDF32A9835"},
		{"billing", "message-1", "BB9FE4FA580EE1BA93E391AF9212CFB2DF1B81B577A0262E26509017537F5E20"},
		{"Billing", "ext-1", "6CE9FA9C5FC44547A023415D0FE3C05FF630BBF4126B8109609AC46034FA9B08"},
		{"Shipping", "ext-1", "8F3691A2E0043E46AD9B6E9D7DCDDB663BB15BE6DAE3FC031E98941ACC8294B2"},
		{"billing", "m1", "7E32AD0C6310C4DD12292DB0B6FB46F7EB8684F507D30C9211D203518F2F99D2"},
		{"billing", "m1 ", "7E1114E64F522BF42307A410D9E4FD72B75B681836BA2A487A0A9F77ED9BD612"},
		{"billing ", "m1", "1CADFF8DDEAB7183392077F0BC598CF7F3E7C85C9C86E84608D7A82F78834BCF"},
		{"Billing", "m1", "8BB0CC5D62FDD6E68160C4E750CAE959C3844D9F3C43831508F16D0954A386FB"},
		{"12", "3", "D94D6714F4E464123A1A19409B536560A396C38132DE1264EC3E01ED9F0E4690"},
		{"1", "23", "0FB57BC0B55A1AFAB01465CE3D3A67DAD9576AB588295BAC06A0B3101AE7308B"},
		{"café", "m", "C64C38F474B0CE5222817BC865E76F4DB94A5B56D78AC3EA38E196C7CA429D39"},
		{"😀ep", "m", "8AA69D0F44F594087DB8CD247034BEC654E1C7F0F3D453015B9B9CD710A63442"},
	}
	for _, c := range cases {
		if got := IdentityHash(c.endpoint, c.message); got != c.want {
			t.Errorf("IdentityHash(%q, %q) = %s, want %s", c.endpoint, c.message, got, c.want)
		}
		k := NewKey(c.endpoint, c.message)
		if k.ID != c.want || k.EndpointID != c.endpoint || k.MessageID != c.message {
			t.Errorf("NewKey(%q, %q) = %+v", c.endpoint, c.message, k)
		}
	}
}

func TestBypassReason(t *testing.T) {
	s := func(v string) *string { return &v }
	cases := []struct {
		name     string
		endpoint string
		message  *string
		want     string
	}{
		{"usable", "billing", s("m-1"), BypassNone},
		{"missing message id", "billing", nil, BypassMissing},
		{"empty message id", "billing", s(""), BypassMissing},
		{"blank message id", "billing", s("   "), BypassMissing},
		{"non-breaking blank message id", "billing", s("\u00a0\t"), BypassMissing},
		{"empty endpoint", "", s("m-1"), BypassMissing},
		{"blank endpoint", "  ", s("m-1"), BypassMissing},
		{"message id at 512", "billing", s(strings.Repeat("m", 512)), BypassNone},
		{"message id at 513", "billing", s(strings.Repeat("m", 513)), BypassTooLong},
		{"512 units with astral runes", "billing", s(strings.Repeat("😀", 256)), BypassNone},
		{"514 units with astral runes", "billing", s(strings.Repeat("😀", 257)), BypassTooLong},
		{"endpoint at 260", strings.Repeat("e", 260), s("m"), BypassNone},
		{"endpoint at 261", strings.Repeat("e", 261), s("m"), BypassTooLong},
	}
	for _, c := range cases {
		if got := BypassReason(c.endpoint, c.message); got != c.want {
			t.Errorf("%s: BypassReason = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestUTF16Len(t *testing.T) {
	for s, want := range map[string]int{"": 0, "abc": 3, "café": 4, "😀ep": 4, "日本": 2} {
		if got := UTF16Len(s); got != want {
			t.Errorf("UTF16Len(%q) = %d, want %d", s, got, want)
		}
	}
}

func BenchmarkIdentityHash(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = IdentityHash("BillingEndpoint", "OrderPlaced-3f2a9c0d11e84b7a")
	}
}
