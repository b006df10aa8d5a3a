# Made by dlperf lab. Rerun with: gnuplot /tmp/ab/lab2/plots/plan-step.gp
set terminal pngcairo size 900,560 enhanced font 'Sans,10'
set output '/tmp/ab/lab2/plots/plan-step.png'
set title 'dlperf plan: planned / measured step time (1 = exact)'
set ylabel 'planned / measured step time'
set grid ytics
set key top left
set yrange [0:*]
set style fill solid
set boxwidth 0.6
set xtics nomirror rotate by 30 right
set offsets 0.5,0.5,0,0
plot '/tmp/ab/lab2/plots/plan-step-0.dat' using 0:2:xtic(1) with boxes fs solid 0.6 lc rgb '#4477aa' notitle, '/tmp/ab/lab2/plots/plan-step-0.dat' using 0:2:(sprintf('%.3g', $2)) with labels offset 0,0.8 notitle
