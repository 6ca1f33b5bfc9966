#!/usr/bin/env python3
"""The plan of the CUDA topk_rows kernel (src/backends/cuda/sampling.cu), emulated in
Python: 64-bit keys ordering (value descending, index ascending; -0.0 as +0.0),
segments of 2,048 keys sorted and cut to k, merge levels of 2,048 // k lists until one
is left; checked against a full sort on rows with ties, signed zeros and -inf, and the
bitonic network itself against sorted(). A check of the indexing, not of the kernel:
the kernel's own tests are test_cuda_sampling's TopkRows* (GPU). Run: python3 this."""
import struct, random
def fbits(v): return struct.unpack('<I', struct.pack('<f', v))[0]
def key(v,i):
    if v == 0.0: v = 0.0
    u = fbits(v)
    u = (~u & 0xFFFFFFFF) if (u & 0x80000000) else (u | 0x80000000)
    return (u << 32) | (0xFFFFFFFF - i)
def bitonic(s):
    N=len(s); size=2
    while size<=N:
        stride=size//2
        while stride>0:
            for t in range(N//2):
                i=2*t-(t&(stride-1)); j=i+stride
                desc=(i&size)==0
                a,b=s[i],s[j]
                if (a<b)==desc: s[i],s[j]=b,a
            stride//=2
        size*=2
    return s
def topk(x,k,K=2048):
    n=len(x); lists=[]
    for seg in range((n+K-1)//K):
        s=[0]*K
        for t in range(K):
            i=seg*K+t
            if i<n and x[i]==x[i]: s[t]=key(x[i],i)
        s=sorted(s,reverse=True) if K>256 else bitonic(s)
        lists.append(s[:k])
    per=K//k
    while True:
        groups=(len(lists)+per-1)//per; new=[]
        for g in range(groups):
            s=[]
            for l in lists[g*per:g*per+per]: s+=l
            s+= [0]*(K-len(s))
            s=sorted(s,reverse=True)
            new.append(s[:k])
        lists=new
        if groups==1: break
    out=[]
    for kk in lists[0]:
        if (kk>>32) > 0x007FFFFF: out.append(0xFFFFFFFF-(kk&0xFFFFFFFF))
    return out
# check bitonic itself on small N
for trial in range(20):
    N=16; s=[random.randrange(100) for _ in range(N)]
    assert bitonic(s[:])==sorted(s,reverse=True)
s=[random.randrange(1<<40) for _ in range(2048)]
assert bitonic(s[:])==sorted(s,reverse=True)
random.seed(1)
for n,k in [(5000,7),(70000,255),(70000,1),(4097,256),(300000,64),(2049,3)]:
    x=[float(random.randint(-50,50)) if random.random()<0.5 else random.uniform(-10,10) for _ in range(n)]
    x[3]=-0.0; x[10]=0.0; x[20]=float('-inf')
    idx=sorted([i for i in range(n) if x[i]>float('-inf')], key=lambda i:(-x[i],i))[:k]
    got=topk(x,k)
    assert got==idx,(n,k,got[:5],idx[:5])
print("topk_rows plan: ok")
