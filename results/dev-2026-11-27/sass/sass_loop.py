# Static SASS counts of the longest loop (the longest backward branch) of each kernel in a
# `cuobjdump -sass` listing. Usage: python3 sass_loop.py FILE.sass
import re,sys,collections
t=open(sys.argv[1]).read()
for f in re.split(r"\n\s*Function : ",t)[1:]:
    head=f.split("\n",1)[0]
    ins=[(int(a,16),p.strip(),o,rest) for a,p,o,rest in re.findall(r"/\*([0-9a-f]{4,})\*/\s+((?:@!?U?P\w+\s+)?)([A-Z0-9_.]+)([^;]*);",f)]
    # back-edges: BRA to lower address; take the one spanning the most
    best=None
    for a,p,o,rest in ins:
        if o.startswith('BRA'):
            m=re.search(r"0x([0-9a-f]+)",rest)
            if m and int(m.group(1),16)<a:
                span=a-int(m.group(1),16)
                if best is None or span>best[0]: best=(span,int(m.group(1),16),a)
    lo,hi=best[1],best[2]
    body=[(p,o) for a,p,o,r in ins if lo<=a<=hi]
    c=collections.Counter(o.split('.')[0] for p,o in body)
    npt=sum(1 for p,o in body if p=="@!PT")
    print(head[-40:-20],"loop %x-%x: %d instr; "%(lo,hi,len(body))+" ".join("%s=%d"%(k,c[k]) for k in ['HMMA','LDSM','LDS','STS','LDL','STL','LDGSTS','REDG','SHFL','BAR','IMAD','LEA','IADD3','LOP3','MOV'])+" @!PT=%d"%npt)
