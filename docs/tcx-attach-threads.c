// Do concurrent TCX attachments (BPF_LINK_CREATE) overlap their RCU grace periods? Measures
// one call per ifindex from THREADS threads; links stay attached until the program exits.
// Usage: tcx-attach-threads PROGRAM_PIN THREADS IFINDEX... (see docs/performance.md)
#include <linux/bpf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define TCX_INGRESS 46
static int prog_fd; static int *ifs; static int per; static double *took;
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static void *worker(void *arg){ long w=(long)arg;
  for(int i=0;i<per;i++){ union bpf_attr a; memset(&a,0,sizeof a);
    a.link_create.prog_fd=prog_fd; a.link_create.target_ifindex=ifs[w*per+i]; a.link_create.attach_type=TCX_INGRESS;
    double t0=now(); int fd=syscall(SYS_bpf,BPF_LINK_CREATE,&a,sizeof a); took[w*per+i]=now()-t0;
    if(fd<0){perror("link_create");exit(1);} /* keep fd open until exit */ }
  return 0;}
int main(int argc,char**argv){ // prog_pin threads ifindex...
  union bpf_attr a; memset(&a,0,sizeof a); a.pathname=(unsigned long)argv[1];
  prog_fd=syscall(SYS_bpf,BPF_OBJ_GET,&a,sizeof a); if(prog_fd<0){perror("obj_get");return 1;}
  int th=atoi(argv[2]); int n=argc-3; ifs=malloc(n*sizeof(int)); took=calloc(n,sizeof(double));
  for(int i=0;i<n;i++) ifs[i]=atoi(argv[3+i]); per=n/th;
  pthread_t t[64]; double t0=now();
  for(long w=0;w<th;w++) pthread_create(&t[w],0,worker,(void*)w);
  for(int w=0;w<th;w++) pthread_join(t[w],0);
  double wall=now()-t0, sum=0; for(int i=0;i<per*th;i++) sum+=took[i];
  printf("%d threads, %d attachments: wall %.1f ms, mean per call %.1f ms\n",th,per*th,wall*1000,sum/(per*th)*1000);
  return 0;}
