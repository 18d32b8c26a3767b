/*
 * sourceaddr.c: an LD_PRELOAD library that makes a process reach IPv4
 * peers from the source address RBDCSI_SOURCE_ADDR names, by binding each
 * unbound TCP socket to it (port 0) before its connect(2). Only for tests:
 * scripts/mirror-lib.sh (start_mirror) runs each site's rbd-mirror with
 * it, so that the clusters see that daemon at its own site's address, as
 * they would an rbd-mirror on a host of that site, and not at the source
 * of every other client on the machine. Ceph's
 * own ms_bind_before_connect binds only the messengers of daemons that
 * have an address of their own; a librados client such as rbd-mirror has
 * none to bind to. A socket it cannot bind is left to connect as it
 * would have.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	connect_fn real = (connect_fn)dlsym(RTLD_NEXT, "connect");
	const char *src = getenv("RBDCSI_SOURCE_ADDR");
	struct sockaddr_in cur, bind_to = {.sin_family = AF_INET};
	socklen_t cur_len = sizeof(cur), type_len = sizeof(int);
	int type = 0, saved = errno;

	if (real == NULL) {
		errno = ENOSYS;
		return -1;
	}
	if (src != NULL && addr != NULL && addr->sa_family == AF_INET &&
	    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) == 0 && type == SOCK_STREAM &&
	    getsockname(fd, (struct sockaddr *)&cur, &cur_len) == 0 && cur.sin_family == AF_INET &&
	    cur.sin_addr.s_addr == htonl(INADDR_ANY) && cur.sin_port == 0 &&
	    inet_pton(AF_INET, src, &bind_to.sin_addr) == 1)
		(void)bind(fd, (const struct sockaddr *)&bind_to, sizeof(bind_to));
	errno = saved;
	return real(fd, addr, len);
}
