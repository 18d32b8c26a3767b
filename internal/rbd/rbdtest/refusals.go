package rbdtest

import (
	"strings"
	"testing"

	"github.com/rbdcsi/rbdcsi/internal/cluster"
	"github.com/rbdcsi/rbdcsi/internal/rbd"
)

// A call Ceph refuses wraps ErrPermission and says who was refused, on
// what and the caps to grant (as docs/install.md gives them), never the
// key: a user whose caps cover no pool, on images, clones and objects; a
// user the monitors reject (a key not its own), on any call. Each call has
// a deadline of its own, so one that hangs fails alone.
func testRefusals(t *testing.T, s *suite) {
	b, p := s.Backend, s.Pool
	poolless, rejected := p, p
	poolless.Cred, rejected.Cred = s.Poolless, s.Rejected
	refused := func(err error, what string, cred cluster.Credentials, want ...string) {
		t.Helper()
		s.wantErr(err, what, rbd.ErrPermission)
		if err == nil {
			return
		}
		for _, w := range append(want, "client."+cred.ID, cluster.CapsDoc) {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", what, err, w)
			}
		}
		if strings.Contains(err.Error(), cred.Key) {
			t.Errorf("%s: the error shows the key", what)
		}
	}
	osd := cluster.CapRBD(p.Namespace, p.Name)
	on := "on " + cluster.OnPool(p.Namespace, p.Name)
	name := s.name("img")

	refused(b.CreateImage(s.ctx(), poolless, name, rbd.ImageSpec{Size: mib}), "CreateImage without osd caps", s.Poolless, on, osd)
	if s.listed(name) {
		t.Fatal("a refused CreateImage made the image")
	}
	s.create(name, mib, nil)
	_, err := b.Stat(s.ctx(), poolless, name)
	refused(err, "Stat without osd caps", s.Poolless, on, osd)
	refused(b.Resize(s.ctx(), poolless, name, 2*mib), "Resize without osd caps", s.Poolless, on, osd)
	refused(b.SetMetadata(s.ctx(), poolless, name, map[string]string{"k": "v"}), "SetMetadata without osd caps", s.Poolless, on, osd)
	refused(b.CreateSnapshot(s.ctx(), poolless, name, "snap"), "CreateSnapshot without osd caps", s.Poolless, on, osd)
	refused(b.RemoveImage(s.ctx(), poolless, name), "RemoveImage without osd caps", s.Poolless, on, osd)
	refused(b.SetOmap(s.ctx(), poolless, s.object("omap"), map[string]string{"k": "v"}), "SetOmap without osd caps", s.Poolless, on, osd)
	if !s.listed(name) {
		t.Fatal("a refused RemoveImage removed the image")
	}

	mons := "the Ceph monitors " + p.MonHost + " refused client." + s.Rejected.ID
	refused(b.CreateImage(s.ctx(), rejected, s.name("other"), rbd.ImageSpec{Size: mib}), "CreateImage by a rejected user", s.Rejected, mons, "userKey")
	_, err = b.Stat(s.ctx(), rejected, name)
	refused(err, "Stat by a rejected user", s.Rejected, mons)
	_, err = b.ListPools(s.ctx(), p.MonHost, s.Rejected)
	refused(err, "ListPools by a rejected user", s.Rejected, mons)
}
